"""The healer's watchdog: a run-failure alert cannot fire when no run starts at all (the daemon
is down, recovery_schedule was switched off by mistake). Dagster's freshness checks on the
recovery assets fail when none was materialized for longer than twice the schedule's period;
recovery_freshness_schedule evaluates them every 30 minutes, and asset_check_alert posts a
failed one. (The daemon itself: `dagster-daemon liveness-check`, see the README.)"""

import warnings
from datetime import timedelta

from dagster import (
    AssetCheckKey,
    AssetChecksDefinition,
    AssetKey,
    AssetSelection,
    DefaultScheduleStatus,
    ScheduleDefinition,
    build_last_update_freshness_checks,
    define_asset_job,
)

from batch_pipeline.recovery.cadence import period_of, recovery_cron
from batch_pipeline.recovery.registry import AREAS
from batch_pipeline.san.settings import Setting

# No materialization for this many recovery periods means no recovery ran.
PERIODS_BEFORE_STALE = 2
CHECK_EVERY_CRON = "*/30 * * * *"
MAX_FRESHNESS_HOURS = 24 * 365

SAN_RECOVERY_FRESHNESS_HOURS = Setting(
    "SAN_RECOVERY_FRESHNESS_HOURS",
    f"{PERIODS_BEFORE_STALE} x the period of `SAN_RECOVERY_CRON` (4 by default)",
    "the watchdog: a recovery asset not materialized for this many hours fails its freshness "
    f"check (a number above 0, at most {MAX_FRESHNESS_HOURS})",
)


def stale_after(timezone: str) -> timedelta:
    """SAN_RECOVERY_FRESHNESS_HOURS, else twice the period of the recovery schedule's cron."""
    default = PERIODS_BEFORE_STALE * period_of(recovery_cron(), timezone)
    hours = SAN_RECOVERY_FRESHNESS_HOURS.number(
        default / timedelta(hours=1), low_exclusive=0, high=MAX_FRESHNESS_HOURS
    )
    return timedelta(hours=hours)


# Dagster names each check of build_last_update_freshness_checks so.
FRESHNESS_CHECK_KEYS = tuple(AssetCheckKey(AssetKey(area), "freshness_check") for area in AREAS)


# Dagster names the checks' op freshness_check_<hash>; the Launchpad and run pages show this.
FRESHNESS_OP = "recovery_freshness"


def named(checks: AssetChecksDefinition, op_name: str) -> AssetChecksDefinition:
    """The same checks, run by an op with a name an operator can read."""
    return AssetChecksDefinition.create(
        keys_by_input_name=checks.keys_by_input_name,
        node_def=checks.op.with_replaced_properties(name=op_name),
        check_specs_by_output_name=checks.check_specs_by_output_name,
        can_subset=checks.can_subset,
    )


def recovery_freshness(timezone: str):
    """(the freshness checks of the recovery assets, the job that evaluates them, its
    schedule)."""
    stale = stale_after(timezone)
    # Superseded by FreshnessPolicy on the assets, whose state is not an asset check evaluation
    # in a run: asset_check_alert (and the assets' Checks tab) would not see it. This public
    # API does what the watchdog needs in Dagster 1.13 (a window, no deadline).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        [built] = build_last_update_freshness_checks(assets=list(AREAS), lower_bound_delta=stale)
    checks = [named(built, FRESHNESS_OP)]
    job = define_asset_job(
        "recovery_freshness_job",
        selection=AssetSelection.checks(*checks),
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
        f"materialized its assets for {stale / timedelta(hours=1):g} h "
        f"({PERIODS_BEFORE_STALE} x the recovery period unless SAN_RECOVERY_FRESHNESS_HOURS says "
        "otherwise).",
    )
    return checks, job, schedule
