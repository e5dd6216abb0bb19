"""run_worker_watchdog: ends the runs whose process is gone (operations/run_workers.py says why
Dagster alone leaves them STARTED). It requests no runs and writes only Dagster's storage."""

from dagster import DefaultSensorStatus, SensorEvaluationContext, SkipReason, sensor

from batch_pipeline.operations.run_workers import (
    CHECK_EVERY,
    end_run,
    gone_run_workers,
    watches_local_processes,
)


@sensor(
    name="run_worker_watchdog",
    minimum_interval_seconds=int(CHECK_EVERY.total_seconds()),
    default_status=DefaultSensorStatus.RUNNING,
    description="Ends a run of this location whose process is gone while Dagster still shows it "
    "in flight (the code server died with it, or Dagster's storage was down when it died): "
    "FAILURE, or CANCELED if it was being canceled, so it frees the recovery_job slot and the "
    "next run audits its writes. Local processes only (Docker and Kubernetes runs are checked "
    "by Dagster's run monitoring). Requests no runs.",
)
def run_worker_watchdog(context: SensorEvaluationContext):
    if not watches_local_processes(context.instance):
        return SkipReason("runs are not local processes here: Dagster's run monitoring checks them")
    ended = []
    for worker in gone_run_workers(context.instance):
        status = end_run(context.instance, worker)
        context.log.warning(
            f"run {worker.run.run_id} ({worker.run.job_name}): its process (pid {worker.pid}) "
            f"is gone; reported {status.value}"
        )
        ended.append(f"{worker.run.run_id} {status.value}")
    return SkipReason(
        f"ended {len(ended)} run(s) whose process was gone: {', '.join(ended)}"
        if ended
        else "every run in flight has its process"
    )
