"""run_retention_job: delete finished runs (and their event logs) older than N days.

Dagster's daemon purges schedule and sensor ticks itself (`retention:` in dagster.yaml) but
keeps runs forever; a 2-hourly recovery makes 4,380 runs a year. A run's event log holds its
materializations, so this horizon is also the horizon of the audit trail of recovered ids:
DAGSTER_RUN_RETENTION_DAYS sets it (default RUN_RETENTION_DAYS).
"""

from datetime import UTC, datetime, timedelta

from dagster import (
    Config,
    DagsterRunStatus,
    DefaultScheduleStatus,
    JobDefinition,
    OpExecutionContext,
    RunsFilter,
    ScheduleDefinition,
    job,
    op,
)
from pydantic import Field

from batch_pipeline.san.settings import Setting, SettingError

FINISHED = [DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]
RUN_RETENTION_DAYS = 90
RETENTION_AT = (4, 30)  # daily, after the 03:00 TIL, before the working day
RETENTION_CRON = f"{RETENTION_AT[1]} {RETENTION_AT[0]} * * *"
MAX_DELETES_PER_RUN = 5_000


# A century: beyond that the cutoff instant is no longer a date either side can compute.
MAX_RETENTION_DAYS = 36_500
DAGSTER_RUN_RETENTION_DAYS = Setting(
    "DAGSTER_RUN_RETENTION_DAYS",
    str(RUN_RETENTION_DAYS),
    "finished runs older than this are deleted nightly, and with them their audit trail (a whole "
    f"number from 1 to {MAX_RETENTION_DAYS}; anything else is an error at load)",
)


class RetentionConfigError(ValueError):
    pass


def run_retention_days() -> int:
    """DAGSTER_RUN_RETENTION_DAYS (default RUN_RETENTION_DAYS); not a whole number in range: an
    error at load."""
    try:
        return DAGSTER_RUN_RETENTION_DAYS.whole_number(
            RUN_RETENTION_DAYS, low=1, high=MAX_RETENTION_DAYS
        )
    except SettingError as error:
        raise RetentionConfigError(str(error)) from None


def purge_runs(
    instance, older_than: datetime, limit: int, keep_run_id: str | None = None
) -> list[str]:
    records = instance.get_run_records(
        filters=RunsFilter(statuses=FINISHED, created_before=older_than),
        limit=limit,
        ascending=True,
    )
    deleted = []
    for record in records:
        if record.dagster_run.run_id != keep_run_id:
            instance.delete_run(record.dagster_run.run_id)
            deleted.append(record.dagster_run.run_id)
    return deleted


def build_run_retention_job(keep_days: int) -> JobDefinition:
    """The job, with `keep_days` as its config default (what the schedule's runs use)."""
    horizon = keep_days  # a class body cannot see a name it assigns itself

    class RunRetentionConfig(Config):
        keep_days: int = Field(
            default=horizon,
            ge=0,
            le=MAX_RETENTION_DAYS,
            description="Finished runs older than this many days are deleted, and with them "
            "their audit trail (DAGSTER_RUN_RETENTION_DAYS).",
        )
        max_deletes: int = Field(
            default=MAX_DELETES_PER_RUN,
            gt=0,
            le=1_000_000,
            description="At most this many runs per run, oldest first (the rest next night).",
        )

    @op(description="Delete finished runs older than keep_days, oldest first.")
    def delete_old_runs(context: OpExecutionContext, config: RunRetentionConfig) -> None:
        cutoff = datetime.now(UTC) - timedelta(days=config.keep_days)
        deleted = purge_runs(
            context.instance, cutoff, config.max_deletes, keep_run_id=context.run_id
        )
        context.log.info(f"deleted {len(deleted)} runs created before {cutoff.isoformat()}")

    @job(
        name="run_retention_job",
        description="Delete finished Dagster runs (and their audit trail) older than keep_days "
        f"(now {keep_days}).",
    )
    def run_retention_job():
        delete_old_runs()

    return run_retention_job


def run_retention_schedule(
    retention_job: JobDefinition, keep_days: int, timezone_name: str
) -> ScheduleDefinition:
    return ScheduleDefinition(
        name="run_retention_schedule",
        job=retention_job,
        cron_schedule=RETENTION_CRON,
        execution_timezone=timezone_name,
        default_status=DefaultScheduleStatus.RUNNING,
        description=f"Daily at {RETENTION_AT[0]:02d}:{RETENTION_AT[1]:02d}: delete finished runs "
        f"older than {keep_days} days (DAGSTER_RUN_RETENTION_DAYS).",
    )
