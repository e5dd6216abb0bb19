"""Keeping the Dagster instance itself healthy: run_retention_job and its nightly schedule, and
run_worker_watchdog, which ends runs whose process is gone."""

from dagster import Definitions, definitions

from batch_pipeline.operations.run_retention import (
    build_run_retention_job,
    run_retention_days,
    run_retention_schedule,
)
from batch_pipeline.operations.sensors import run_worker_watchdog
from batch_pipeline.san.timezone import san_timezone_name


@definitions
def defs() -> Definitions:
    keep_days = run_retention_days()
    job = build_run_retention_job(keep_days)
    return Definitions(
        jobs=[job],
        schedules=[run_retention_schedule(job, keep_days, san_timezone_name())],
        sensors=[run_worker_watchdog],
    )
