"""The fast lane's rules, as plain functions over a SQLAlchemy connection (no Dagster here).

recovery_job heals on the design's 2-hourly cadence; the fast lane heals the same fragments
within minutes, between those runs, and replaces nothing:

- lost event: a PENDING job no worker claimed is announced again (same job id, row unchanged)
  when its age crosses 1, 2, 4, 8 and 16 minutes (REANNOUNCE_AFTER doubling, REANNOUNCEMENTS
  times), all before the design's 30-minute ghost rule closes it. The schedule is the job's age:
  a probe window (since, until] announces the jobs whose age crossed a step inside it, so the
  lane keeps no state of its own beyond the window's end (the sensor's cursor).
- failed attempt: a target of a recovery of the registry whose latest attempt ended (FAILED)
  and still lacks its result, with no active job and under max_attempts, gets its next attempt
  RETRY_AFTER x 2^(attempts-1) after that failure (1, 2, 4 ... min, at most the recovery
  cadence, when recovery_job takes it anyway).
- app death: a target with no job at all is enqueued as soon as it is past the grace
  (orphan_min_age_minutes).
- a dead worker (PROCESSING) stays on the design's 60-minute rule: SAN's workers send no
  heartbeat, and the rule is the AI call's timeout ceiling.

Re-announcing is safe only for workers that claim with compare-and-set (UPDATE ... WHERE
status = 'PENDING'), as the README's worker contract says; SAN_REANNOUNCE=off turns it off.
Every probe is bounded and indexed: active jobs by ix_san_jobs_active_created, recent failures
by ix_san_jobs_failed_updated, recent targets by their created_at.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pandas as pd
from sqlalchemy import and_, or_, select
from sqlalchemy.engine import Connection, Engine

from batch_pipeline.recovery.ghost_jobs import STALE_PENDING_AFTER
from batch_pipeline.recovery.plan import (
    MAX_ATTEMPTS,
    RecoveryPolicy,
    RecoveryReport,
    heal_age_metadata,
    heal_ages,
)
from batch_pipeline.recovery.targets import (
    ORPHAN_MIN_AGE,
    TargetRecovery,
    detect_query,
    recover_targets,
)
from batch_pipeline.san.audit import capped_ids
from batch_pipeline.san.database import read_transaction
from batch_pipeline.san.dialects import dialect
from batch_pipeline.san.dispatch import Dispatcher, NewJob
from batch_pipeline.san.frames import INT, TEXT, UTC_DATETIME, FrameSchema, frame_instant
from batch_pipeline.san.limits import WriteLimits
from batch_pipeline.san.tables import ACTIVE_STATUSES, FAILED, PENDING, jobs

# Lost events: the first re-announcement after this, each next one after twice the wait before.
REANNOUNCE_AFTER = timedelta(seconds=60)
REANNOUNCEMENTS = (
    5  # 1, 2, 4, 8, 16 min: the app's announcement + 5 <= 6, before the 30-min ghost rule
)
# Failed attempts: the next attempt this long after the first failure, doubling per attempt ...
RETRY_AFTER = timedelta(minutes=1)
# ... up to the design's cadence: recovery_job takes whatever waits longer anyway.
RETRY_BACKOFF_CEILING = timedelta(hours=2)
# Failures older than this are recovery_job's (the ceiling, plus a run's length).
FAILURE_HORIZON = RETRY_BACKOFF_CEILING + timedelta(hours=1)
# App deaths: targets past the grace by at most this are the lane's; older ones recovery_job's.
APP_DEATH_CATCH_UP = timedelta(minutes=30)
# New jobs per recovery area and tick, oldest first: a storm after an outage stays bounded.
MAX_ENQUEUE_PER_TICK = 500
# Announcements per tick: they are cheap, but a tick must stay bounded.
MAX_ANNOUNCEMENTS_PER_TICK = 10_000
# The sensor's probe interval, and the longest window a tick looks back (a daemon that was down
# for an hour does not announce an hour of steps at once: those jobs are ghosts by then).
# 15 s, not 30: a lost event whose re-announced attempt then fails needs two of the lane's
# steps (REANNOUNCE_AFTER, then RETRY_AFTER), each waiting up to one interval plus a run's
# launch; at 30 s that is ~3.2 min, past the 3-minute target (docs/reliability.md).
PROBE_INTERVAL = timedelta(seconds=15)
LONGEST_WINDOW = timedelta(minutes=20)


# Without these (valid) indexes every probe would read whole tables every PROBE_INTERVAL: on
# PostgreSQL
# the sensor then skips, naming them, and recovery_job alone heals.
LANE_INDEXES = (
    "ix_san_jobs_active_created",
    "ix_san_jobs_failed_updated",
    "ix_san_jobs_target",
    "ix_san_scraps_created_at",
    "ix_san_scraps_unrefined_by_id",
    "ix_san_daily_summaries_unwritten_by_id",
)


def announcement_ages(
    first: timedelta = REANNOUNCE_AFTER,
    count: int = REANNOUNCEMENTS,
    stale_pending_after: timedelta = STALE_PENDING_AFTER,
) -> list[timedelta]:
    """The ages at which an unclaimed PENDING job is announced again: first, 2 x first, ...,
    only those before the ghost rule takes the job."""
    return [first * 2**step for step in range(count) if first * 2**step < stale_pending_after]


def retry_backoff(
    attempts: pd.Series, first: timedelta = RETRY_AFTER, ceiling: timedelta = RETRY_BACKOFF_CEILING
) -> pd.Series:
    """The wait after the latest failure before attempt `attempts + 1`: first x 2^(attempts-1),
    at most `ceiling`."""
    doublings = (attempts.clip(lower=1) - 1).clip(upper=30).astype("int64")
    waits = pd.to_timedelta(first.total_seconds() * (2**doublings), unit="s")
    return waits.clip(upper=pd.Timedelta(ceiling))


@dataclass(frozen=True)
class LaneWindow:
    """One probe's window of database time, (since, until]."""

    since: datetime
    until: datetime

    @classmethod
    def after(
        cls,
        previous_until: datetime | None,
        now: datetime,
        interval: timedelta = PROBE_INTERVAL,
        longest: timedelta = LONGEST_WINDOW,
    ) -> LaneWindow:
        since = previous_until if previous_until is not None else now - interval
        return cls(since=min(max(since, now - longest), now), until=now)


@dataclass(frozen=True)
class LaneSettings:
    """What one tick and its run heal (the defaults are the constants above)."""

    reannounce: bool = True
    reannounce_after: timedelta = REANNOUNCE_AFTER
    reannouncements: int = REANNOUNCEMENTS
    stale_pending_after: timedelta = STALE_PENDING_AFTER
    retry_after: timedelta = RETRY_AFTER
    orphan_min_age: timedelta = ORPHAN_MIN_AGE
    max_attempts: int = MAX_ATTEMPTS
    max_enqueue_per_tick: int = MAX_ENQUEUE_PER_TICK
    policy: RecoveryPolicy = field(default_factory=RecoveryPolicy)

    @property
    def ages(self) -> list[timedelta]:
        return announcement_ages(
            self.reannounce_after, self.reannouncements, self.stale_pending_after
        )


# -- lost events --------------------------------------------------------------------------------
UNCLAIMED_JOBS = FrameSchema(
    name="UnclaimedJobs",
    description="PENDING jobs whose age crossed a re-announcement step in the probe window.",
    columns={"job_id": INT, "job_type": TEXT, "target_id": INT, "created_at": UTC_DATETIME},
)


def due_announcements_query(
    window: LaneWindow, ages: list[timedelta], limit: int = MAX_ANNOUNCEMENTS_PER_TICK
):
    """PENDING jobs with a step `created_at + age` inside the window, oldest first."""
    created = jobs.c.created_at
    return (
        select(
            jobs.c.id.label("job_id"),
            jobs.c.job_type,
            jobs.c.target_id,
            frame_instant(created).label("created_at"),
        )
        .where(
            jobs.c.status.in_(ACTIVE_STATUSES),  # the partial active-jobs index
            jobs.c.status == PENDING,
            # one index range over every step, then the steps themselves
            created > window.since - ages[-1],
            created <= window.until - ages[0],
            or_(
                *(and_(created > window.since - age, created <= window.until - age) for age in ages)
            ),
        )
        .order_by(created, jobs.c.id)
        .limit(limit)
    )


def due_announcements(conn: Connection, window: LaneWindow, settings: LaneSettings) -> pd.DataFrame:
    if not settings.reannounce or not settings.ages:
        return UNCLAIMED_JOBS.from_rows([])
    return UNCLAIMED_JOBS.from_rows(conn.execute(due_announcements_query(window, settings.ages)))


@dataclass
class AnnounceReport:
    detected: int = 0
    announced: int = 0
    claimed_meanwhile: int = (
        0  # taken by a worker (or closed) between the probe and the announcement
    )
    announce_failures: int = 0
    announced_ids: list[int] = field(default_factory=list)
    heal_ages_seconds: list[float] = field(default_factory=list)

    def metadata(self) -> dict:
        return {
            "detected": self.detected,
            "announced": self.announced,
            "claimed_meanwhile": self.claimed_meanwhile,
            "announce_failures": self.announce_failures,
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
    second event a no-op for it.)"""
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
    report.announce_failures = dispatcher.announce_after_commit(to_announce)
    report.announced = len(to_announce)
    report.claimed_meanwhile = len(due) - len(to_announce)
    report.announced_ids = [job.job_id for job in to_announce]
    report.heal_ages_seconds = heal_ages(announce["created_at"], now)
    return report


# -- failed attempts and app deaths
# -----------------------------------------------------------------
def recent_failures(recovery: TargetRecovery, now: datetime):
    """Targets with a failed attempt of the recovery's job type inside the horizon: an index
    range over ix_san_jobs_failed_updated."""
    return select(jobs.c.target_id).where(
        jobs.c.status == FAILED,
        jobs.c.updated_at >= now - FAILURE_HORIZON,
        jobs.c.job_type == recovery.job_type,
    )


def failed_targets_query(conn: Connection, recovery: TargetRecovery, now: datetime):
    """The detection of the recovery's targets among those with a recent failure. The failed
    ids are read first (a range of ix_san_jobs_failed_updated) and then probed by id: as one
    semi-join, PostgreSQL read the recovery's whole partial index at scale 10 (200 ms a tick)."""
    failed_ids = list(conn.execute(recent_failures(recovery, now).distinct()).scalars())
    return detect_query(
        recovery,
        created_before=now,
        among=dialect(conn).id_in(recovery.table.c.id, failed_ids),
        latest_attempt=True,
    )


def due_retries(
    conn: Connection, recovery: TargetRecovery, now: datetime, settings: LaneSettings
) -> pd.DataFrame:
    """The recovery's targets the lane heals now, oldest wait first, in the recovery's frame:
    - failed: latest attempt ended, still needs the work, no active job, under max_attempts,
      and its backoff since the latest attempt has passed;
    - never enqueued: past the grace by at most APP_DEATH_CATCH_UP, with no job at all."""
    failed = recovery.frame.from_rows(conn.execute(failed_targets_query(conn, recovery, now)))
    failed = failed[failed["attempts"] > 0]
    if settings.max_attempts:
        failed = failed[failed["attempts"] < settings.max_attempts]
    failed = failed[
        failed["waiting_since"] + retry_backoff(failed["attempts"], settings.retry_after)
        <= pd.Timestamp(now)
    ]
    grace_ends = now - settings.orphan_min_age
    unqueued = recovery.frame.from_rows(
        conn.execute(
            detect_query(
                recovery, created_before=grace_ends, created_since=grace_ends - APP_DEATH_CATCH_UP
            )
        )
    )
    unqueued = unqueued[unqueued["attempts"] == 0]
    due = pd.concat([failed, unqueued]).drop_duplicates(subset=[recovery.id_key])
    return due.sort_values(["waiting_since", recovery.id_key], kind="stable").reset_index(drop=True)


def retry(
    engine: Engine,
    dispatcher: Dispatcher,
    recovery: TargetRecovery,
    due: pd.DataFrame,
    now: datetime,
    settings: LaneSettings,
) -> RecoveryReport:
    """Enqueue the due targets through recovery_job's own path (guards, poison cap, re-check)."""
    policy = RecoveryPolicy(
        max_attempts=settings.max_attempts,
        max_enqueue_per_run=settings.max_enqueue_per_tick,
        batch_size=settings.policy.batch_size,
        dry_run=settings.policy.dry_run,
        limits=settings.policy.limits,
    )
    return recover_targets(
        engine,
        dispatcher,
        recovery,
        due,
        now=now,
        policy=policy,
        thresholds={
            "retry_after_seconds": settings.retry_after.total_seconds(),
            "orphan_min_age_minutes": settings.orphan_min_age.total_seconds() / 60,
        },
    )


# -- one probe: what the sensor asks before it requests a run
# ---------------------------------------
@dataclass(frozen=True)
class Probe:
    window: LaneWindow
    announcements: int
    retries: dict[str, int]  # area -> due targets

    @property
    def found(self) -> int:
        return self.announcements + sum(self.retries.values())

    @property
    def anything_to_heal(self) -> bool:
        return self.found > 0

    def summary(self) -> str:
        retries = ", ".join(f"{area} {count}" for area, count in self.retries.items())
        return (
            f"window {self.window.since.isoformat()} .. {self.window.until.isoformat()}: "
            f"{self.announcements} jobs to re-announce; targets to retry or enqueue: {retries}"
        )


def probe(conn: Connection, window: LaneWindow, settings: LaneSettings, recoveries) -> Probe:
    return Probe(
        window=window,
        announcements=len(due_announcements(conn, window, settings)),
        retries={
            recovery.area: len(due_retries(conn, recovery, window.until, settings))
            for recovery in recoveries
        },
    )


def retries_metadata(reports: list[RecoveryReport]) -> dict:
    """One audit entry for the lane's retries of every area: totals (plotted), per-area counts, the
    target -> new job pairs (each tagged with its area) and the time the healed targets waited."""
    counts = (
        "detected",
        "enqueued",
        "exhausted",
        "deferred",
        "skipped_by_race",
        "announce_failures",
    )
    return {
        **{name: sum(getattr(report, name) for report in reports) for name in counts},
        **heal_age_metadata([age for report in reports for age in report.heal_ages_seconds]),
        "by_area": {
            report.area: {name: getattr(report, name) for name in counts} for report in reports
        },
        **capped_ids(
            recovered=[
                {"area": report.area, **pair} for report in reports for pair in report.recovered
            ]
        ),
        **(
            {"earlier_attempts": max(report.earlier_attempts for report in reports)}
            if any(report.earlier_attempts for report in reports)
            else {}
        ),
        "thresholds": reports[0].thresholds if reports else {},
    }
