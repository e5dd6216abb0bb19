"""til_coverage, per TIL partition, run after each TIL run (see sensors.py): every active user of
D has a summary for D, and no summary of D has waited more than TIL_WAIT_LIMIT for its TIL."""

from datetime import date, timedelta

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetKey,
    DailyPartitionsDefinition,
    asset_check,
)
from sqlalchemy import and_, select

from batch_pipeline.san.database import database_now, read_transaction
from batch_pipeline.san.durations import in_words
from batch_pipeline.san.resources import SanDatabase
from batch_pipeline.san.tables import daily_summaries
from batch_pipeline.til.auto_generation import AREA, day_bounds, detect_users_of_day

TIL_WAIT_LIMIT = timedelta(hours=2)
ID_SAMPLE = 100


# The day a check run looks at: set by til/sensors.py on the check run it requests.
TIL_DAY_TAG = "batch_pipeline/til_day"


def checked_day(context: AssetCheckExecutionContext) -> str | None:
    """The day from the run tag, else the latest materialized TIL partition."""
    tagged = context.run.tags.get(TIL_DAY_TAG)
    if tagged:
        return tagged
    event = context.instance.get_latest_materialization_event(AssetKey(AREA))
    return event.asset_materialization.partition if event else None


def coverage_of_day(conn, day: date, timezone: str) -> tuple[set[int], set[int], list[int]]:
    """D's active users, the users with a summary of D, and the summaries of D waiting for
    their TIL longer than TIL_WAIT_LIMIT."""
    users = detect_users_of_day(conn, *day_bounds(day, timezone))
    active = set(users[users["card_count"] > 0]["user_id"].tolist())
    of_day = daily_summaries.c.target_date == day
    with_summary = set(conn.execute(select(daily_summaries.c.user_id).where(of_day)).scalars())
    waiting = (
        conn.execute(
            select(daily_summaries.c.id)
            .where(
                and_(
                    of_day,
                    daily_summaries.c.content.is_(None),
                    daily_summaries.c.created_at < database_now(conn) - TIL_WAIT_LIMIT,
                )
            )
            .order_by(daily_summaries.c.id)
        )
        .scalars()
        .all()
    )
    return active, with_summary, list(waiting)


def til_coverage_check(partitions: DailyPartitionsDefinition):
    # One check evaluation per TIL run, for that run's day (named in the metadata). Dagster 1.13's
    # partitioned asset checks are preview and a checks-only job cannot carry their partition, so
    # the day travels in a run tag instead.
    @asset_check(
        asset=AREA,
        name="til_coverage",
        description="Every active user of D has a summary for D; no summary of D waits more than "
        f"{in_words(TIL_WAIT_LIMIT)} for its TIL.",
    )
    def til_coverage(
        context: AssetCheckExecutionContext, san_database: SanDatabase
    ) -> AssetCheckResult:
        key = checked_day(context)
        if key is None:
            return AssetCheckResult(
                passed=True, description="no TIL partition materialized yet", metadata={"day": ""}
            )
        day = date.fromisoformat(key)
        with read_transaction(san_database.get_engine()) as conn:
            active, with_summary, waiting = coverage_of_day(conn, day, partitions.timezone)
        missing = sorted(active - with_summary)
        problems = []
        if missing:
            problems.append(f"{len(missing)} active users of {day} have no summary")
        if waiting:
            problems.append(
                f"{len(waiting)} summaries of {day} have waited more than "
                f"{in_words(TIL_WAIT_LIMIT)} for their TIL"
            )
        return AssetCheckResult(
            passed=not problems,
            severity=AssetCheckSeverity.WARN,
            description="; ".join(problems) or None,
            metadata={
                "day": key,
                "active_users": len(active),
                "users_without_summary": len(missing),
                "user_ids_without_summary": missing[:ID_SAMPLE],
                "summaries_waiting_over_2h": len(waiting),
                "waiting_summary_ids": list(waiting[:ID_SAMPLE]),
            },
        )

    return til_coverage
