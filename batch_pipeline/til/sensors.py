"""Run til_coverage for the day after every successful TIL run of that day."""

from dagster import (
    DagsterRunStatus,
    DefaultSensorStatus,
    JobDefinition,
    RunRequest,
    RunStatusSensorContext,
    run_status_sensor,
)

from batch_pipeline.til.checks import TIL_DAY_TAG
from batch_pipeline.til.partitions import PARTITION_TAG


def til_checks_after_run(til_job: JobDefinition, til_checks_job):
    @run_status_sensor(
        name="til_checks_after_run",
        run_status=DagsterRunStatus.SUCCESS,
        monitored_jobs=[til_job],
        request_job=til_checks_job,
        default_status=DefaultSensorStatus.RUNNING,
        description="After each successful TIL run, checks that day's coverage.",
    )
    def sensor(context: RunStatusSensorContext):
        run = context.dagster_run
        return RunRequest(run_key=run.run_id, tags={TIL_DAY_TAG: run.tags[PARTITION_TAG]})

    return sensor
