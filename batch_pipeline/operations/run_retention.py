"""run_retention_job: delete finished runs (and their event logs) older than N days.

Dagster's daemon purges schedule and sensor ticks itself (`retention:` in dagster.yaml) but
keeps runs forever; a 2-hourly recovery makes 4,380 runs a year. A run's event log holds its
materializations, so this horizon is also the horizon of the audit trail of recovered ids:
DAGSTER_RUN_RETENTION_DAYS sets it (default RUN_RETENTION_DAYS).
"""

import os
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

FINISHED = [DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]
RUN_RETENTION_DAYS = 90
RETENTION_CRON = "30 4 * * *"


class RetentionConfigError(ValueError):
    pass


def run_retention_days() -> int:
    """DAGSTER_RUN_RETENTION_DAYS (default RUN_RETENTION_DAYS); not a whole number >= 1: an error at
    load."""
    raw = (os.environ.get("DAGSTER_RUN_RETENTION_DAYS") or str(RUN_RETENTION_DAYS)).strip()
    if not raw.isdigit() or int(raw) < 1:
        raise RetentionConfigError(
            f"DAGSTER_RUN_RETENTION_DAYS={raw!r} is not a whole number of days >= 1 (it is how "
            "long runs, "
            "and with them the audit trail of recovered ids, are kept; default 90)"
        )
    return int(raw)


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
            description=(
                "Finished runs older than this many days are deleted, and with them their audit "
                "trail "
                "(DAGSTER_RUN_RETENTION_DAYS)."
            ),
        )
        max_deletes: int = Field(default=5_000, gt=0, description="At most this many runs per run.")

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
        description=f"Daily at 04:30: delete finished runs older than {keep_days} days "
        "(DAGSTER_RUN_RETENTION_DAYS).",
    )
