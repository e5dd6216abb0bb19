"""recovery_schedule: every 2 hours, in SAN's time zone (SAN_RECOVERY_CRON overrides the period)."""

import os

from dagster import DagsterInvalidDefinitionError, DefaultScheduleStatus, ScheduleDefinition

from batch_pipeline.recovery.jobs import recovery_job
from batch_pipeline.recovery.registry import RECOVERIES

RECOVERY_CRON = "0 */2 * * *"


def recovery_cron() -> str:
    return (os.environ.get("SAN_RECOVERY_CRON") or RECOVERY_CRON).strip()


def recovery_schedule(timezone: str) -> ScheduleDefinition:
    """The schedule; an invalid SAN_RECOVERY_CRON is an error at load that names it (Dagster's
    own, public, cron validation decides what is valid)."""
    cron = recovery_cron()
    try:
        return ScheduleDefinition(
            name="recovery_schedule",
            job=recovery_job,
            cron_schedule=cron,
            execution_timezone=timezone,
            default_status=DefaultScheduleStatus.RUNNING,
            description="runRecovery(): "
            + ", ".join(r.area for r in RECOVERIES)
            + ", in that order (SAN_RECOVERY_CRON).",
        )
    except DagsterInvalidDefinitionError as error:
        raise ValueError(
            f"SAN_RECOVERY_CRON={cron!r} is not a valid cron expression (e.g. '0 */2 * * *')"
        ) from error
