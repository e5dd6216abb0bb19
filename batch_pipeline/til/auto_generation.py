"""TIL auto-generation: every user with cards from day D -> new DailySummary +
enqueue(TIL_GENERATION).

Active users of D: users with at least one scrap created during D (00:00 to 24:00 in SAN's time
zone) that has a knowledge card, whenever the card itself was made; a scrap saved at 23:59 whose
card came at 00:40 counts for D. Users whose scraps of D have no card yet are not included and
are reported as waiting for cards.

A TIL is created even if the user already has one for D (the design allows several per day),
but one run never creates two for the same user: a run's summaries all carry one instant as
`created_at`, the database's clock when the run first wrote (kept as a tag of the run, see
til/ops.py), so a retried op or a run re-executed from failure finds the users it already did
and skips them.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pandas as pd
from sqlalchemy import func, select, tuple_
from sqlalchemy.engine import Connection, Engine

from batch_pipeline.san.audit import capped_ids
from batch_pipeline.san.database import read_transaction
from batch_pipeline.san.dialects import dialect, named_rows
from batch_pipeline.san.dispatch import Dispatcher, NewJob
from batch_pipeline.san.enqueue import BatchWritten, enqueue, run_in_batches
from batch_pipeline.san.frames import INT, FrameSchema
from batch_pipeline.san.indexes import SCRAPS_CREATED_AT_INDEX
from batch_pipeline.san.job_source import JobSource
from batch_pipeline.san.limits import WriteLimits
from batch_pipeline.san.sweep import sweep_pacing, swept_after, with_sweep_pacing
from batch_pipeline.san.tables import (
    TIL_GENERATION,
    daily_summaries,
    jobs,
    knowledge_cards,
    scraps,
    users,
)

AREA = "til_auto_generation"

USERS_OF_DAY = FrameSchema(
    name="TilUsersOfDay",
    description="Every user with scraps created on day D: how many, and how many of them have a "
    "card.",
    columns={"user_id": INT, "scrap_count": INT, "card_count": INT},
)


def day_bounds(day: date, zone: str) -> tuple[datetime, datetime]:
    """D's [start, end) as UTC instants: midnight to midnight in `zone` (23 or 25 h across DST).
    The one definition of day D: the TIL op, its check and the sandbox's worker all use it (a
    test keeps it equal to Dagster's daily partition window).

    Comparing `created_at` to two instants lets PostgreSQL use an index on scraps.created_at;
    casting `created_at AT TIME ZONE … ::date` would not.
    """
    tz = ZoneInfo(zone)
    start = datetime.combine(day, time(0), tzinfo=tz)
    end = datetime.combine(day + timedelta(days=1), time(0), tzinfo=tz)
    return start.astimezone(UTC), end.astimezone(UTC)


def scraps_of_day_query(after: tuple[datetime, int], end: datetime, limit: int | None):
    """The next `limit` scraps before `end` past `after` in (created_at, id) order, each with
    whether it has a card: a range of ix_san_scraps_created_at (a chunk of san/sweep.py)."""
    return (
        select(
            scraps.c.created_at,
            scraps.c.id,
            scraps.c.user_id,
            knowledge_cards.c.scrap_id.is_not(None).label("has_card"),
        )
        .select_from(scraps.outerjoin(knowledge_cards, knowledge_cards.c.scrap_id == scraps.c.id))
        .where(
            scraps.c.created_at >= after[0],  # the index's range; the tuple breaks its ties
            scraps.c.created_at < end,
            tuple_(scraps.c.created_at, scraps.c.id) > tuple_(*after),
        )
        .order_by(scraps.c.created_at, scraps.c.id)
        .limit(limit)
    )


def detect_users_of_day(
    conn: Connection, start: datetime, end: datetime, limits: WriteLimits = WriteLimits()
) -> pd.DataFrame:
    """Every user with scraps in [start, end), by user id; active ones have card_count > 0.
    The day's scraps are read in chunks paced by the throttle (san/sweep.py), not in one
    statement that holds a core for as long as the day is large. Without the created_at index
    each chunk would scan the table: one statement then, as its scan is the same."""
    pacing = None
    if dialect(conn).missing_valid_indexes(conn, [SCRAPS_CREATED_AT_INDEX]):
        rows = conn.execute(scraps_of_day_query((start, 0), end, None)).all()
    else:
        rows, pacing = swept_after(
            conn,
            (start, 0),  # ids are positive: every scrap of the day is past it
            lambda after, limit: conn.execute(scraps_of_day_query(after, end, limit)).all(),
            lambda row: (row.created_at, row.id),
            limits,
        )
    by_user: dict[int, list[int]] = {}
    for row in rows:
        counts = by_user.setdefault(row.user_id, [0, 0])
        counts[0] += 1
        counts[1] += bool(row.has_card)
    of_day = USERS_OF_DAY.from_rows(
        (user_id, scrap_count, card_count)
        for user_id, (scrap_count, card_count) in sorted(by_user.items())
    )
    return with_sweep_pacing(of_day, pacing) if pacing else of_day


@dataclass(frozen=True)
class SummariesOfDay:
    """The summaries of D already there, from one read of daily_summaries (the app has no
    index on target_date, so each read is a scan of the table)."""

    done_in_run: dict[int, int]  # user id -> summary id, made by this run (an earlier attempt of
    # its step, or the failed run it re-executes): their summaries carry its start instant
    users_with_an_earlier_til: set[int]  # users with a summary of D from another run


def summaries_of_day(conn: Connection, day: date, summaries_created_at: datetime) -> SummariesOfDay:
    this_run = (daily_summaries.c.created_at == summaries_created_at).label("this_run")
    rows = named_rows(
        conn.execute(
            select(daily_summaries.c.user_id, daily_summaries.c.id, this_run).where(
                daily_summaries.c.target_date == day
            )
        ),
        ("user_id", "id", "this_run"),
    )
    return SummariesOfDay(
        done_in_run={user: summary for user, summary, ours in rows if ours},
        users_with_an_earlier_til={user for user, _summary, ours in rows if not ours},
    )


def jobs_of_summaries(conn: Connection, summary_ids: Sequence[int]) -> list[int]:
    """The TIL_GENERATION job each summary was created with (its first one)."""
    if not summary_ids:
        return []
    query = (
        select(func.min(jobs.c.id))
        .where(
            jobs.c.job_type == TIL_GENERATION,
            dialect(conn).id_in(jobs.c.target_id, list(summary_ids)),
        )
        .group_by(jobs.c.target_id)
    )
    return sorted(conn.execute(query).scalars())


def summaries_source(
    user_ids: Sequence[int], day: date, summaries_created_at: datetime
) -> JobSource:
    """A batch of new summaries as the enqueue path's source: the inserted rows are the
    targets of their TIL_GENERATION jobs, created in the same statement (PostgreSQL) or
    transaction, so a summary never exists without its job.

    A user the app deleted since detection gets no summary (the insert skips it, and the batch
    reports it), instead of failing the whole batch on the summary's foreign key. (Not locked:
    a KEY SHARE lock per user would dirty every user row of the batch a second time, the foreign
    key check locks them anyway; a delete committed within the insert statement itself still
    fails its batch, which the step's retry then writes without that user.)"""
    values = {
        "constants": {"target_date": day, "created_at": summaries_created_at},
        "id_columns": {"user_id": list(user_ids)},
        "returning": ["id", "user_id"],
        "referenced": {"user_id": users.c.id},
    }
    return JobSource(
        job_type=TIL_GENERATION,
        inserts=(daily_summaries, values),
        returned=("id", "user_id"),
        target_column="id",
        creates_targets=True,
    )


@dataclass(frozen=True)
class TilBatch:
    summaries: list[tuple[int, int]]  # (id, user_id)
    jobs: list[NewJob]
    users_gone: list[int]  # deleted by the app since detection: no summary


def create_batch(
    conn: Connection,
    user_ids: Sequence[int],
    day: date,
    summaries_created_at: datetime,
    now: datetime,
    notify_channel: str | None = None,
) -> BatchWritten[TilBatch]:
    """One transaction: the summaries and their TIL_GENERATION jobs, for the users still there."""
    outcome = enqueue(
        conn,
        summaries_source(user_ids, day, summaries_created_at),
        now=now,
        max_attempts=0,
        notify_channel=notify_channel,
    )
    summaries = [(row["id"], row["user_id"]) for row in outcome.source_rows]
    kept = {user_id for _summary, user_id in summaries}
    gone = [user_id for user_id in user_ids if user_id not in kept]
    return outcome.as_batch(TilBatch(summaries, outcome.created, gone))


@dataclass
class TilReport:
    day: date
    day_start_utc: datetime
    day_end_utc: datetime
    dry_run: bool
    summaries_created_at: datetime
    active_users: int = 0
    users_waiting_for_cards: int = 0
    already_done_in_run: int = 0
    users_with_an_earlier_til: int | None = None  # None: not looked up (a scheduled run)
    summaries_created: int = 0
    jobs_created: int = 0
    announce_failures: int = 0
    summary_ids: list[int] = field(default_factory=list)
    job_ids: list[int] = field(default_factory=list)
    # deleted by the app between detection and write
    users_gone: list[int] = field(default_factory=list)
    throttle: dict = field(default_factory=dict)  # how its writes were paced (san/throttle.py)
    detection_throttle: dict = field(default_factory=dict)  # ... and its detection's sweep

    def metadata(self) -> dict:
        return {
            "active_users": self.active_users,
            "summaries_created": self.summaries_created,
            "jobs_created": self.jobs_created,
            "users_waiting_for_cards": self.users_waiting_for_cards,
            "already_done_in_run": self.already_done_in_run,
            **(
                {}
                if self.users_with_an_earlier_til is None
                else {"users_with_an_earlier_til": self.users_with_an_earlier_til}
            ),
            "announce_failures": self.announce_failures,
            "dry_run": self.dry_run,
            "users_gone": len(self.users_gone),
            **capped_ids(
                summary_ids=self.summary_ids, job_ids=self.job_ids, users_gone_ids=self.users_gone
            ),
            # Every summary of this run, whatever the cap: target_date = day AND created_at = this.
            "summaries_created_at": self.summaries_created_at.isoformat(),
            "day_start_utc": self.day_start_utc.isoformat(),
            "day_end_utc": self.day_end_utc.isoformat(),
            **({"throttle": self.throttle} if self.throttle else {}),
            **({"detection_throttle": self.detection_throttle} if self.detection_throttle else {}),
        }


def create_daily_tils(
    engine: Engine,
    dispatcher: Dispatcher,
    users: pd.DataFrame,
    *,
    day: date,
    bounds: tuple[datetime, datetime],
    summaries_created_at: datetime,
    now: datetime,
    batch_size: int,
    dry_run: bool = False,
    limits: WriteLimits = WriteLimits(),
    earlier_attempt_possible: bool = True,
    count_earlier_tils: bool = False,
) -> TilReport:
    """A summary and a TIL_GENERATION job for every active user of D not yet done by this run.

    `earlier_attempt_possible=False` (the op's first attempt in a run that is not a
    re-execution) skips looking for this run's summaries: none can exist, and the lookup is a
    scan of all of daily_summaries, which only grows (no index of the app's serves it).
    `count_earlier_tils` reports how many users would get a second TIL for D (the same one scan:
    dry runs and backfills ask for it)."""
    active = users[users["card_count"] > 0]["user_id"].tolist()
    report = TilReport(
        day=day,
        day_start_utc=bounds[0],
        day_end_utc=bounds[1],
        dry_run=dry_run,
        summaries_created_at=summaries_created_at,
        active_users=len(active),
        users_waiting_for_cards=int((users["card_count"] == 0).sum()),
        detection_throttle=sweep_pacing(users),
    )
    done: dict[int, int] = {}
    earlier_jobs: list[int] = []
    if earlier_attempt_possible or count_earlier_tils:
        with read_transaction(engine, limits) as conn:
            there = summaries_of_day(conn, day, summaries_created_at)
            if earlier_attempt_possible:
                done = there.done_in_run
                earlier_jobs = jobs_of_summaries(conn, sorted(done.values()))
    todo = [u for u in active if u not in done]
    if count_earlier_tils:  # a backfill of D gives each of them a second TIL (the design allows it)
        report.users_with_an_earlier_til = len(there.users_with_an_earlier_til.intersection(todo))
    report.already_done_in_run = len(active) - len(todo)
    if dry_run:
        return report

    results, batches = run_in_batches(
        engine,
        dispatcher,
        todo,
        batch_size,
        lambda conn, batch: create_batch(
            conn, batch, day, summaries_created_at, now, dispatcher.statement_channel
        ),
        limits,
    )
    return with_writes(report, done, earlier_jobs, results, batches)


def with_writes(report: TilReport, done: dict[int, int], earlier_jobs, results, batches):
    """The audit covers every attempt: what an earlier one committed before it failed, then this
    one's."""
    report.summary_ids = sorted(done.values()) + [
        summary_id for batch in results for summary_id, _user in batch.summaries
    ]
    report.job_ids = earlier_jobs + [job.job_id for batch in results for job in batch.jobs]
    report.users_gone = [user_id for batch in results for user_id in batch.users_gone]
    report.summaries_created = len(report.summary_ids)
    report.jobs_created = len(report.job_ids)
    report.announce_failures = batches.announce_failures
    report.throttle = batches.throttle.metadata()
    return report
