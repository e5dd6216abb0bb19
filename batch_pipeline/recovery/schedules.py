"""recovery_schedule: every 2 hours, in SAN's time zone."""

from dagster import DefaultScheduleStatus, ScheduleDefinition

from batch_pipeline.recovery.jobs import recovery_job

RECOVERY_CRON = "0 */2 * * *"


def recovery_schedule(timezone: str) -> ScheduleDefinition:
    return ScheduleDefinition(
        name="recovery_schedule",
        job=recovery_job,
        cron_schedule=RECOVERY_CRON,
        execution_timezone=timezone,
        default_status=DefaultScheduleStatus.RUNNING,
        description="runRecovery(): ghost jobs, orphan scraps, unrefined scraps, every 2 hours.",
    )
