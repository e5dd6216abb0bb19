"""Run the recovery assets' checks after every successful recovery run."""

from dagster import DagsterRunStatus, DefaultSensorStatus, RunRequest, RunStatusSensorContext, run_status_sensor

from batch_pipeline.recovery.jobs import recovery_checks_job, recovery_job


@run_status_sensor(
    name="recovery_checks_after_run", run_status=DagsterRunStatus.SUCCESS, monitored_jobs=[recovery_job],
    request_job=recovery_checks_job, default_status=DefaultSensorStatus.RUNNING,
    description="After each successful recovery_job run, runs the recovery assets' checks.",
)
def recovery_checks_after_run(context: RunStatusSensorContext):
    return RunRequest(run_key=context.dagster_run.run_id)
