"""recovery_schedule: every 2 hours, in SAN's time zone (SAN_RECOVERY_CRON overrides the period)."""

import os

from dagster import DefaultScheduleStatus, ScheduleDefinition
from dagster._utils.schedules import is_valid_cron_string

from batch_pipeline.recovery.jobs import recovery_job
from batch_pipeline.recovery.registry import RECOVERIES

RECOVERY_CRON = "0 */2 * * *"


def recovery_cron() -> str:
    cron = (os.environ.get("SAN_RECOVERY_CRON") or RECOVERY_CRON).strip()
    if not is_valid_cron_string(cron):
        raise ValueError(f"SAN_RECOVERY_CRON={cron!r} is not a valid cron expression (e.g. '0 */2 * * *')")
    return cron


def recovery_schedule(timezone: str) -> ScheduleDefinition:
    return ScheduleDefinition(
        name="recovery_schedule",
        job=recovery_job,
        cron_schedule=recovery_cron(),
        execution_timezone=timezone,
        default_status=DefaultScheduleStatus.RUNNING,
        description="runRecovery(): " + ", ".join(r.area for r in RECOVERIES) + ", in that order (SAN_RECOVERY_CRON).",
    )
