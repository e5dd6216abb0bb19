"""Dagster ops of til_auto_generation_job: thin wrappers over til/auto_generation.py."""

from datetime import UTC, date, datetime

from dagster import (
    AssetMaterialization,
    AssetObservation,
    DagsterRun,
    Failure,
    In,
    OpExecutionContext,
    Out,
    op,
)

from batch_pipeline.san.database import database_now, read_transaction, utc_now
from batch_pipeline.san.memory import paused_gc
from batch_pipeline.san.ops import (
    DATABASE_RETRY,
    as_metadata,
    retried_only_if_transient,
    san_database_check_op,
    warn_about_unannounced_jobs,
)
from batch_pipeline.san.resources import JobDispatcherResource, SanDatabase
from batch_pipeline.til import auto_generation
from batch_pipeline.til.config import TilConfig

UsersOfDayType = auto_generation.USERS_OF_DAY.dagster_type()

check_san_database_for_til = san_database_check_op(TilConfig, "check_san_database_for_til")

# Dagster's documented run tags: the first run of a re-execution chain; the backfill a run is part
# of.
ROOT_RUN_ID_TAG = "dagster/root_run_id"
BACKFILL_TAG = "dagster/backfill"


def partition_day(context: OpExecutionContext) -> date:
    """D, from the partition key; a key that is not a date is a clear, non-retried error."""
    key = context.partition_key if context.has_partition_key else None
    try:
        return date.fromisoformat(key)
    except (TypeError, ValueError) as error:
        raise Failure(
            description="til_auto_generation_job needs a day partition key YYYY-MM-DD, "
            f"got {key!r}",
            allow_retries=False,
        ) from error


def day_window(context: OpExecutionContext) -> tuple[datetime, datetime]:
    """D's bounds in UTC: `day_bounds` (the one definition of day D) in the partitions' zone."""
    return auto_generation.day_bounds(
        partition_day(context), context.job_def.partitions_def.timezone
    )


def run_started_at(context: OpExecutionContext) -> datetime:
    """The start instant of the run's root run: stable across op retries and re-executions.

    From the record's `start_time` (a POSIX timestamp from the run's start event), not its
    `create_timestamp`: Dagster's run storage keeps that one as a naive timestamp in its
    database's zone and reads it back as UTC, 9 h in the future on an instance in Asia/Seoul."""
    run: DagsterRun = context.run
    root_id = run.tags.get(ROOT_RUN_ID_TAG, run.run_id)
    record = context.instance.get_run_record_by_id(root_id)
    if record is not None and record.start_time is not None:
        return datetime.fromtimestamp(record.start_time, tz=UTC)
    return utc_now()  # not started yet (cannot happen inside its own op): now, once


@op(
    out=Out(UsersOfDayType),
    retry_policy=DATABASE_RETRY,
    description="Users with scraps on day D and how many have cards.",
)
def detect_til_users(context: OpExecutionContext, settings: TilConfig, san_database: SanDatabase):
    start, end = day_window(context)
    with (
        retried_only_if_transient(),
        paused_gc(),
        read_transaction(san_database.get_engine(), settings.write_limits) as conn,
    ):
        return auto_generation.detect_users_of_day(conn, start, end)


@op(
    ins={"users": In(UsersOfDayType)},
    retry_policy=DATABASE_RETRY,
    description="A new DailySummary and a TIL_GENERATION job for every active user of D, in "
    "bounded batches.",
)
def create_daily_tils(
    context: OpExecutionContext,
    settings: TilConfig,
    users,
    san_database: SanDatabase,
    job_dispatcher: JobDispatcherResource,
) -> None:
    engine = san_database.get_engine()
    day = partition_day(context)
    with retried_only_if_transient(), paused_gc():
        report = auto_generation.create_daily_tils(
            engine,
            job_dispatcher.for_database(engine),
            users,
            day=day,
            bounds=day_window(context),
            run_started_at=run_started_at(context),
            now=database_now(engine),
            batch_size=settings.batch_size,
            dry_run=settings.dry_run,
            limits=settings.write_limits,
            earlier_attempt_possible=context.retry_number > 0
            or ROOT_RUN_ID_TAG in context.run.tags,
            # what an operator must see before (dry run) and in a backfill: who gets a second TIL
            count_earlier_tils=settings.dry_run or BACKFILL_TAG in context.run.tags,
        )
    # A dry run is observed, not materialized: the plots count real runs only.
    event = AssetObservation if report.dry_run else AssetMaterialization
    context.log_event(
        event(
            asset_key=auto_generation.AREA,
            partition=context.partition_key,
            metadata=as_metadata(report.metadata()),
        )
    )
    context.log.info(
        f"TIL {day}: {report.active_users} active users, {report.summaries_created} summaries and "
        f"{report.jobs_created} jobs created, {report.already_done_in_run} already done by this "
        "run, "
        f"{report.users_waiting_for_cards} users still waiting for cards"
        + (
            ""
            if report.users_with_an_earlier_til is None
            else f"; {report.users_with_an_earlier_til} of them already have a TIL for {day} from "
            "another run and " + ("would get" if report.dry_run else "got") + " a second one"
        )
        + (" (dry run: nothing written)" if report.dry_run else "")
    )
    warn_about_unannounced_jobs(context, auto_generation.AREA, report.announce_failures)
