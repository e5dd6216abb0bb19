"""run_retention_job: delete finished runs (and their event logs) older than N days.

Dagster's daemon purges schedule and sensor ticks itself (`retention:` in dagster.yaml) but
keeps runs forever; a 2-hourly recovery makes 4,380 runs a year.
"""

from datetime import datetime, timedelta, timezone

from dagster import (
    Config,
    DagsterRunStatus,
    DefaultScheduleStatus,
    OpExecutionContext,
    RunsFilter,
    ScheduleDefinition,
    job,
    op,
)
from pydantic import Field

FINISHED = [DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]


class RunRetentionConfig(Config):
    keep_days: int = Field(default=90, ge=0, description="Finished runs older than this many days are deleted.")
    max_deletes: int = Field(default=5_000, gt=0, description="At most this many runs per run.")


def purge_runs(instance, older_than: datetime, limit: int, keep_run_id: str | None = None) -> list[str]:
    records = instance.get_run_records(
        filters=RunsFilter(statuses=FINISHED, created_before=older_than), limit=limit, ascending=True
    )
    deleted = []
    for record in records:
        if record.dagster_run.run_id != keep_run_id:
            instance.delete_run(record.dagster_run.run_id)
            deleted.append(record.dagster_run.run_id)
    return deleted


@op(description="Delete finished runs older than keep_days, oldest first.")
def delete_old_runs(context: OpExecutionContext, config: RunRetentionConfig) -> None:
    cutoff = datetime.now(timezone.utc) - timedelta(days=config.keep_days)
    deleted = purge_runs(context.instance, cutoff, config.max_deletes, keep_run_id=context.run_id)
    context.log.info(f"deleted {len(deleted)} runs created before {cutoff.isoformat()}")


@job(description="Delete finished Dagster runs older than keep_days (default 90).")
def run_retention_job():
    delete_old_runs()


def run_retention_schedule(timezone_name: str) -> ScheduleDefinition:
    return ScheduleDefinition(
        name="run_retention_schedule", job=run_retention_job, cron_schedule="30 4 * * *",
        execution_timezone=timezone_name, default_status=DefaultScheduleStatus.RUNNING,
        description="Daily at 04:30: delete finished runs older than 90 days.",
    )
