"""recovery_schedule: every 2 hours, in SAN's time zone (SAN_RECOVERY_CRON overrides the
period: recovery/cadence.py)."""

from dagster import DagsterInvalidDefinitionError, DefaultScheduleStatus, ScheduleDefinition

from batch_pipeline.recovery.cadence import RECOVERY_CRON, recovery_cron
from batch_pipeline.recovery.jobs import recovery_job
from batch_pipeline.recovery.registry import RECOVERIES


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
            description=f"runRecovery() at `{cron}` ({timezone}; SAN_RECOVERY_CRON): "
            + ", ".join(r.area for r in RECOVERIES)
            + ", in that order.",
        )
    except DagsterInvalidDefinitionError as error:
        raise ValueError(
            f"SAN_RECOVERY_CRON={cron!r} is not a valid cron expression (e.g. '{RECOVERY_CRON}')"
        ) from error
