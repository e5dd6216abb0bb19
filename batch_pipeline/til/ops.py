"""Dagster ops of til_auto_generation_job: thin wrappers over til/auto_generation.py."""

from datetime import date, datetime

from dagster import (
    AssetExecutionContext,
    AssetObservation,
    DagsterRun,
    Failure,
    In,
    Nothing,
    OpExecutionContext,
    Out,
    Output,
    op,
)

from batch_pipeline.san.database import database_now, read_transaction
from batch_pipeline.san.memory import paused_gc
from batch_pipeline.san.ops import (
    SWEPT,
    as_metadata,
    paced,
    retried_on_error,
    retried_only_if_transient,
    san_database_check_op,
    warn_about_unannounced_jobs,
)
from batch_pipeline.san.resources import JobDispatcherResource, SanDatabase
from batch_pipeline.til import auto_generation
from batch_pipeline.til.config import TilConfig
from batch_pipeline.til.partitions import PARTITION_SET_TAG, PARTITION_TAG, partition_set_name

UsersOfDayType = auto_generation.USERS_OF_DAY.dagster_type()


def counted_under_its_partition(context: OpExecutionContext, _settings: TilConfig) -> None:
    """Tag the run with its job's partition set where its launcher did not (the GraphQL API, the
    CLI and `dagster job launch` may set `dagster/partition` alone): the job's Partitions tab
    counts only runs with both, and showed such a day Missing after it ran."""
    run: DagsterRun = context.run
    if PARTITION_TAG in run.tags and PARTITION_SET_TAG not in run.tags:
        context.instance.add_run_tags(
            run.run_id, {PARTITION_SET_TAG: partition_set_name(context.job_def.name)}
        )


check_san_database_for_til = san_database_check_op(
    TilConfig, "check_san_database_for_til", first=counted_under_its_partition
)

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


# The run tag that sums up a TIL run in the run list: "120 TILs for 2026-12-04". Capitalised so
# it comes first: the UI lists a run's tags in key order.
CREATED_TAG = "Created"

# The tag of a TIL run (its root run, for a re-execution) that holds the instant its summaries
# carry as created_at.
SUMMARIES_CREATED_AT_TAG = "batch_pipeline/summaries_created_at"


def summaries_created_at(
    context: OpExecutionContext, engine, dry_run: bool
) -> tuple[datetime, bool]:
    """The instant every summary of this run carries as `created_at`, and whether an earlier
    attempt may have used it already. The database's clock (as every timestamp batch_pipeline
    writes into SAN's tables: a host ahead by 2 h would stamp summaries 2 h in the future, and
    the lane and recovery_job would misjudge their age by as much), taken once, when the run
    first writes, and kept as a tag of the run's root: a retried op and a re-executed run read
    it back and find their own summaries. A dry run writes nothing and keeps no tag."""
    run: DagsterRun = context.run
    root_id = run.tags.get(ROOT_RUN_ID_TAG, run.run_id)
    root = context.instance.get_run_by_id(root_id)  # read again: a retry's tags are fresh
    kept = root.tags.get(SUMMARIES_CREATED_AT_TAG) if root is not None else None
    if kept:
        return datetime.fromisoformat(kept), True
    now = database_now(engine)
    if not dry_run:
        context.instance.add_run_tags(root_id, {SUMMARIES_CREATED_AT_TAG: now.isoformat()})
    return now, False


@op(
    out=Out(UsersOfDayType),
    description="Users with scraps on day D and how many have cards.",
)
@retried_on_error
def detect_til_users(context: OpExecutionContext, settings: TilConfig, san_database: SanDatabase):
    start, end = day_window(context)
    with (
        retried_only_if_transient(),
        paused_gc(),
        read_transaction(san_database.get_engine(), settings.write_limits) as conn,
    ):
        return auto_generation.detect_users_of_day(conn, start, end, settings.write_limits)


@op(
    ins={"users": In(UsersOfDayType)},
    # optional: a dry run materializes nothing
    out=Out(Nothing, is_required=False, description="The til_auto_generation audit trail."),
    description="A new DailySummary and a TIL_GENERATION job for every active user of D, in "
    "bounded batches.",
)
@retried_on_error
def create_daily_tils(
    context: AssetExecutionContext,
    settings: TilConfig,
    users,
    san_database: SanDatabase,
    job_dispatcher: JobDispatcherResource,
) -> None:
    engine = san_database.get_engine()
    op_context = context.op_execution_context
    day = partition_day(op_context)
    with retried_only_if_transient(), paused_gc():
        created_at, earlier_attempt_possible = summaries_created_at(
            op_context, engine, settings.dry_run
        )
        report = auto_generation.create_daily_tils(
            engine,
            job_dispatcher.for_database(engine),
            users,
            day=day,
            bounds=day_window(op_context),
            summaries_created_at=created_at,
            now=database_now(engine),
            batch_size=settings.batch_size,
            dry_run=settings.dry_run,
            limits=settings.write_limits,
            earlier_attempt_possible=earlier_attempt_possible,
            # what an operator must see before (dry run) and in a backfill: who gets a second TIL
            count_earlier_tils=settings.dry_run or BACKFILL_TAG in context.run.tags,
        )
    metadata = as_metadata(report.metadata())
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
        + paced(report.throttle)
        + paced(report.detection_throttle, SWEPT)
    )
    warn_about_unannounced_jobs(op_context, auto_generation.AREA, report.announce_failures)
    if report.dry_run:  # observed, not materialized: the plots count real runs only
        context.log_event(
            AssetObservation(
                asset_key=auto_generation.AREA, partition=context.partition_key, metadata=metadata
            )
        )
        return
    context.add_asset_metadata(metadata)
    created = report.summaries_created  # the run list shows it
    context.instance.add_run_tags(
        context.run_id, {CREATED_TAG: f"{created} TIL{'' if created == 1 else 's'} for {day}"}
    )
    yield Output(None)
