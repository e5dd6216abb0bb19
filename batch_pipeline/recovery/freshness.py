"""The healer's watchdog: a run-failure alert cannot fire when no run starts at all (the daemon
is down, recovery_schedule was switched off by mistake). Dagster's freshness checks on the
recovery assets fail when none was materialized for longer than twice the schedule's period;
recovery_freshness_schedule evaluates them every 30 minutes, and asset_check_alert posts a
failed one. (The daemon itself: `dagster-daemon liveness-check`, see the README.)"""

import os
import warnings
from datetime import timedelta

from dagster import (
    AssetSelection,
    DefaultScheduleStatus,
    ScheduleDefinition,
    build_last_update_freshness_checks,
    define_asset_job,
)

from batch_pipeline.recovery.registry import AREAS

# The design's cadence is 2 h: no materialization for twice that means no recovery ran.
STALE_AFTER = timedelta(hours=4)
CHECK_EVERY_CRON = "*/30 * * * *"


def stale_after() -> timedelta:
    """SAN_RECOVERY_FRESHNESS_HOURS (set it to twice a changed SAN_RECOVERY_CRON period)."""
    value = os.environ.get("SAN_RECOVERY_FRESHNESS_HOURS")
    if value is None:
        return STALE_AFTER
    try:
        hours = float(value)
    except ValueError:
        hours = 0.0
    if hours <= 0:
        raise ValueError(
            f"SAN_RECOVERY_FRESHNESS_HOURS={value!r} must be a number of hours > 0 (e.g. 4)"
        )
    return timedelta(hours=hours)


def freshness_checks():
    """The freshness checks of the recovery assets (a window, no deadline: no time zone needed)."""
    # Superseded by FreshnessPolicy on the assets, whose state is not an asset check evaluation
    # in a run: asset_check_alert (and the assets' Checks tab) would not see it. This public
    # API does what the watchdog needs in Dagster 1.13.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_last_update_freshness_checks(
            assets=list(AREAS), lower_bound_delta=stale_after()
        )


RECOVERY_FRESHNESS_CHECKS = freshness_checks()


def recovery_freshness(timezone: str):
    """(the job that evaluates the freshness checks, its schedule)."""
    job = define_asset_job(
        "recovery_freshness_job",
        selection=AssetSelection.checks(*RECOVERY_FRESHNESS_CHECKS),
        description="Evaluates the recovery assets' freshness checks (no recovery run for too "
        "long).",
    )
    schedule = ScheduleDefinition(
        name="recovery_freshness_schedule",
        job=job,
        cron_schedule=CHECK_EVERY_CRON,
        execution_timezone=timezone,
        default_status=DefaultScheduleStatus.RUNNING,
        description="The healer's watchdog: fails a freshness check when recovery_job has not "
        "materialized its "
        "assets for twice the recovery period (SAN_RECOVERY_FRESHNESS_HOURS, default 4).",
    )
    return job, schedule
