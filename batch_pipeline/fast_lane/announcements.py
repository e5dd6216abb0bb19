"""Lost events: a PENDING job no worker claimed is announced again, with its own job id and its
row untouched, long before the design's 30-minute ghost rule would close and replace it.

How long to wait before announcing again follows how fast SAN's workers claim: the threshold
is REANNOUNCE_MULTIPLE x the p99 of the recent claim latencies (started_at - created_at of the
newest jobs, leaving out the jobs the lane itself announced again), never below
REANNOUNCE_FLOOR, rounded up to a step of the grid FLOOR x 2^k. A job is announced again each
time its age crosses a step of the grid from the threshold on, inside a probe window (since,
until]: the windows follow one another, so each step fires once for a job, whatever the
threshold does meanwhile, and no job ever hears more than len(GRID) re-announcements.

A tick announces at most MAX_ANNOUNCEMENTS_PER_TICK jobs, oldest first; the rest of its window
is taken by the next ticks from where it stopped (a keyset, never the same first page again).

Plain functions over a SQLAlchemy connection; sensors.py runs them every tick.
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pandas as pd
from sqlalchemy import and_, func, or_, select
from sqlalchemy.engine import Connection, Engine

from batch_pipeline.recovery.ghost_jobs import STALE_PENDING_AFTER
from batch_pipeline.recovery.plan import heal_age_metadata, heal_ages
from batch_pipeline.san.audit import capped_ids
from batch_pipeline.san.database import read_transaction
from batch_pipeline.san.dialects import dialect, named_rows
from batch_pipeline.san.dispatch import Dispatcher, NewJob
from batch_pipeline.san.frames import INT, TEXT, UTC_DATETIME, FrameSchema, frame_instant
from batch_pipeline.san.limits import WriteLimits
from batch_pipeline.san.tables import ACTIVE_STATUSES, COMPLETED, PENDING, jobs

# The shortest wait before a job is announced again, and the grid of the steps after it.
REANNOUNCE_FLOOR = timedelta(seconds=10)
# The threshold: this many times the p99 of the recent claim latencies (a worker claims within
# its p99 most of the time; twice that is rarely a job it would still have claimed).
REANNOUNCE_MULTIPLE = 2
GRID = tuple(
    REANNOUNCE_FLOOR * 2**step
    for step in range(32)
    if REANNOUNCE_FLOOR * 2**step < STALE_PENDING_AFTER
)
# The claim-latency sample: the newest RECENT_JOBS jobs (a primary-key range), those created in
# the last CLAIM_SAMPLE_WINDOW; fewer than MIN_CLAIM_SAMPLES claims and the threshold stays.
# 2,000 rows cover the window at 200 jobs a minute; their cost: docs/benchmarks.md, "The fast
# lane's probe".
RECENT_JOBS = 2_000
CLAIM_SAMPLE_WINDOW = timedelta(minutes=10)
MIN_CLAIM_SAMPLES = 10
# How often the sample is read again (between two reads the threshold stays).
ESTIMATE_EVERY = timedelta(seconds=30)
# A tick stays bounded; the rest of its window is the next tick's, from where it stopped.
MAX_ANNOUNCEMENTS_PER_TICK = 10_000
# The longest window a tick looks back: a daemon that was down for an hour does not announce an
# hour of steps at once (those jobs are ghosts by then, or heard at a later step).
LONGEST_WINDOW = timedelta(minutes=20)


def threshold_for(claim_p99: timedelta | None, floor: timedelta = REANNOUNCE_FLOOR) -> timedelta:
    """REANNOUNCE_MULTIPLE x the claim latency's p99, rounded up to the grid, at least `floor`;
    `floor` when there is no estimate."""
    wanted = REANNOUNCE_MULTIPLE * claim_p99 if claim_p99 is not None else floor
    threshold = floor
    while threshold < wanted and threshold * 2 < STALE_PENDING_AFTER:
        threshold *= 2
    return threshold


def announcement_ages(
    threshold: timedelta,
    stale_pending_after: timedelta = STALE_PENDING_AFTER,
    floor: timedelta = REANNOUNCE_FLOOR,
) -> list[timedelta]:
    """The ages at which an unclaimed PENDING job is announced again: the grid's steps from
    `threshold` on, before the ghost rule takes the job."""
    steps, age = [], floor
    while age < stale_pending_after:
        if age >= threshold:
            steps.append(age)
        age *= 2
    return steps


@dataclass(frozen=True)
class ClaimStats:
    """What the newest jobs say about SAN's workers and its AI service."""

    claims: int  # claimed jobs in the sample
    p99: timedelta | None  # their claim latency's p99 (None: too few to tell)
    last_success: dict[str, datetime]  # job type -> the latest COMPLETED job's end


def claim_sample_query():
    """The newest RECENT_JOBS jobs (a primary-key range): what claim_stats reads."""
    newest = select(func.max(jobs.c.id)).scalar_subquery()
    return select(
        jobs.c.id,
        jobs.c.job_type,
        jobs.c.status,
        frame_instant(jobs.c.created_at).label("created_at"),
        frame_instant(jobs.c.started_at).label("started_at"),
        frame_instant(jobs.c.updated_at).label("updated_at"),
    ).where(jobs.c.id > newest - RECENT_JOBS)


def claim_stats(
    conn: Connection, now: datetime, excluded_ids: set[int] = frozenset()
) -> ClaimStats:
    """The claim latencies of the newest jobs created within CLAIM_SAMPLE_WINDOW (a primary-key
    range, RECENT_JOBS rows at most), leaving out `excluded_ids` (jobs announced again, whose
    claim the re-announcement caused); and, per job type, when a job of it last succeeded."""
    rows = named_rows(
        conn.execute(claim_sample_query()),
        ("id", "job_type", "status", "created_at", "started_at", "updated_at"),
    )
    frame = pd.DataFrame(
        rows, columns=["id", "job_type", "status", "created", "started", "updated"]
    )
    for column in ("created", "started", "updated"):
        frame[column] = pd.to_datetime(frame[column], utc=True)
    claimed = frame[
        frame["started"].notna()
        & (frame["created"] >= pd.Timestamp(now - CLAIM_SAMPLE_WINDOW))
        & ~frame["id"].isin(list(excluded_ids))
    ]
    latency = (claimed["started"] - claimed["created"]).clip(lower=pd.Timedelta(0))
    p99 = latency.quantile(0.99).to_pytimedelta() if len(latency) >= MIN_CLAIM_SAMPLES else None
    done = frame[frame["status"] == COMPLETED]
    last_success = {
        job_type: ended.to_pydatetime()
        for job_type, ended in done.groupby("job_type")["updated"].max().items()
    }
    return ClaimStats(claims=len(latency), p99=p99, last_success=last_success)


@dataclass(frozen=True)
class LaneWindow:
    """One probe's window of database time, (since, until], and where in it the previous tick
    stopped when it reached the cap: `after` = the (created_at, id) of the last job it took."""

    since: datetime
    until: datetime
    after: tuple[datetime, int] | None = None

    @classmethod
    def after_window(
        cls,
        previous_until: datetime | None,
        now: datetime,
        first: timedelta,
        longest: timedelta = LONGEST_WINDOW,
    ) -> "LaneWindow":
        """The window from the previous one's end to now (the first window: `first` long),
        reaching back at most `longest`."""
        since = previous_until if previous_until is not None else now - first
        return cls(since=min(max(since, now - longest), now), until=now)


UNCLAIMED_JOBS = FrameSchema(
    name="UnclaimedJobs",
    description="PENDING jobs whose age crossed a re-announcement step in the probe window.",
    columns={"job_id": INT, "job_type": TEXT, "target_id": INT, "created_at": UTC_DATETIME},
)


def _due(window: LaneWindow, ages: list[timedelta]):
    created = jobs.c.created_at
    conditions = [
        jobs.c.status.in_(ACTIVE_STATUSES),  # the partial active-jobs index
        jobs.c.status == PENDING,
        # one index range over every step, then the steps themselves
        created > window.since - ages[-1],
        created <= window.until - ages[0],
        or_(*(and_(created > window.since - age, created <= window.until - age) for age in ages)),
    ]
    if window.after is not None:  # the rest of a window whose first page a tick took
        after_created, after_id = window.after
        conditions.append(
            or_(created > after_created, and_(created == after_created, jobs.c.id > after_id))
        )
    return conditions


def due_announcements_query(
    window: LaneWindow, ages: list[timedelta], limit: int = MAX_ANNOUNCEMENTS_PER_TICK
):
    """PENDING jobs with a step `created_at + age` inside the window (after `window.after`),
    oldest first, at most `limit`."""
    return (
        select(
            jobs.c.id.label("job_id"),
            jobs.c.job_type,
            jobs.c.target_id,
            frame_instant(jobs.c.created_at).label("created_at"),
        )
        .where(*_due(window, ages))
        .order_by(jobs.c.created_at, jobs.c.id)
        .limit(limit)
    )


def due_announcements(
    conn: Connection,
    window: LaneWindow,
    ages: list[timedelta],
    limit: int = MAX_ANNOUNCEMENTS_PER_TICK,
) -> pd.DataFrame:
    if not ages:
        return UNCLAIMED_JOBS.from_rows([])
    return UNCLAIMED_JOBS.from_rows(conn.execute(due_announcements_query(window, ages, limit)))


def due_after(conn: Connection, window: LaneWindow, ages: list[timedelta]) -> int:
    """How many jobs of the window are due after `window.after` (what a full page left)."""
    return conn.execute(
        select(func.count()).select_from(jobs).where(*_due(window, ages))
    ).scalar_one()


@dataclass
class AnnounceReport:
    detected: int = 0
    announced: int = 0  # delivered: sent in a committed transaction, or accepted by Redis
    claimed_meanwhile: int = 0  # taken by a worker (or closed) between the probe and now
    announce_failures: int = 0
    left_for_next_tick: int = 0  # due in this window beyond the cap: the next ticks take them
    announced_ids: list[int] = field(default_factory=list)
    heal_ages_seconds: list[float] = field(default_factory=list)

    def metadata(self) -> dict:
        return {
            "detected": self.detected,
            "announced": self.announced,
            "claimed_meanwhile": self.claimed_meanwhile,
            "announce_failures": self.announce_failures,
            "left_for_next_tick": self.left_for_next_tick,
            **heal_age_metadata(self.heal_ages_seconds),
            **capped_ids(announced_job_ids=self.announced_ids),
        }


def reannounce(
    engine: Engine,
    dispatcher: Dispatcher,
    due: pd.DataFrame,
    now: datetime,
    limits: WriteLimits = WriteLimits(),
) -> AnnounceReport:
    """Announce the due jobs again, those still PENDING at this instant; the rows are not
    touched. (A worker may claim one right after the check: its compare-and-set claim makes the
    second event a no-op for it.) `announced` counts deliveries: a failed Redis publish is an
    `announce_failures`, never an announcement."""
    report = AnnounceReport(detected=len(due))
    if due.empty:
        return report
    with read_transaction(engine, limits) as conn:
        still_pending = set(
            conn.scalars(
                select(jobs.c.id).where(
                    dialect(conn).id_in(jobs.c.id, due["job_id"].tolist()), jobs.c.status == PENDING
                )
            )
        )
        announce = due[due["job_id"].isin(still_pending)]
        to_announce = [
            NewJob(job_id, job_type, target_id)
            for job_id, job_type, target_id in zip(
                announce["job_id"].tolist(),
                announce["job_type"].tolist(),
                announce["target_id"].tolist(),
                strict=True,
            )
        ]
        dispatcher.announce_in_transaction(conn, to_announce)
    failures = dispatcher.announce_after_commit(to_announce)
    report.announce_failures = failures
    report.claimed_meanwhile = len(due) - len(to_announce)
    if not failures:
        report.announced = len(to_announce)
        report.announced_ids = [job.job_id for job in to_announce]
        report.heal_ages_seconds = heal_ages(announce["created_at"], now)
    return report
