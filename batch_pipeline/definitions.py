"""The batch_pipeline code location: `from batch_pipeline.definitions import defs`."""

import os

from dagster import Definitions, EnvVar

from batch_pipeline.alerts.sensors import check_failure_alert, run_failure_alert
from batch_pipeline.fast_lane.assets import fast_heal
from batch_pipeline.fast_lane.jobs import fast_heal_job
from batch_pipeline.fast_lane.sensors import fast_heal_sensor
from batch_pipeline.operations.run_retention import (
    build_run_retention_job,
    run_retention_days,
    run_retention_schedule,
)
from batch_pipeline.recovery.assets import recovery_assets
from batch_pipeline.recovery.freshness import RECOVERY_FRESHNESS_CHECKS, recovery_freshness
from batch_pipeline.recovery.jobs import recovery_job
from batch_pipeline.recovery.schedules import recovery_schedule
from batch_pipeline.san.resources import JobDispatcherResource, SanDatabase
from batch_pipeline.san.timezone import san_timezone_name
from batch_pipeline.til.assets import til_asset
from batch_pipeline.til.checks import til_coverage_check
from batch_pipeline.til.jobs import build_til_checks_job, build_til_job
from batch_pipeline.til.partitions import til_partitions
from batch_pipeline.til.schedules import til_schedule
from batch_pipeline.til.sensors import til_checks_after_run


def _from_env(name: str):
    """An EnvVar when the variable is set (shown as such in the UI), else None (the default)."""
    return EnvVar(name) if os.environ.get(name) else None


def san_resources() -> dict:
    dispatcher = {"kind": _from_env("SAN_JOB_DISPATCHER")}
    if os.environ.get("SAN_REDIS_URL"):
        dispatcher["redis_url"] = EnvVar("SAN_REDIS_URL")
    if os.environ.get("SAN_REDIS_STREAM"):
        dispatcher["redis_stream"] = EnvVar("SAN_REDIS_STREAM")
    if os.environ.get("SAN_NOTIFY_CHANNEL"):
        dispatcher["notify_channel"] = EnvVar("SAN_NOTIFY_CHANNEL")
    return {
        "san_database": SanDatabase(url=_from_env("SAN_DATABASE_URL")),
        "job_dispatcher": JobDispatcherResource(**dispatcher),
    }


def build_definitions() -> Definitions:
    timezone = san_timezone_name()
    days = til_partitions(timezone)
    til_job = build_til_job(days)
    til_coverage = til_coverage_check(days)
    til_checks_job = build_til_checks_job(til_coverage)
    keep_days = run_retention_days()
    run_retention_job = build_run_retention_job(keep_days)
    freshness_job, freshness_schedule = recovery_freshness(timezone)
    return Definitions(
        assets=[*recovery_assets, fast_heal, til_asset(days)],
        asset_checks=[
            til_coverage,
            *RECOVERY_FRESHNESS_CHECKS,
        ],  # the recovery assets carry their other checks themselves
        jobs=[
            recovery_job,
            fast_heal_job,
            til_job,
            til_checks_job,
            run_retention_job,
            freshness_job,
        ],
        schedules=[
            recovery_schedule(timezone),
            til_schedule(til_job),
            run_retention_schedule(run_retention_job, keep_days, timezone),
            freshness_schedule,
        ],
        sensors=[
            fast_heal_sensor,
            til_checks_after_run(til_job, til_checks_job),
            run_failure_alert,
            check_failure_alert([recovery_job, til_checks_job, freshness_job]),
        ],
        resources=san_resources(),
    )


defs = build_definitions()
