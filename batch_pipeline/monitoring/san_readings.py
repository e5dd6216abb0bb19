"""What the metrics endpoint reads from SAN's database, as plain functions over a connection:
the ghost backlog and the oldest active job of each (job_type, status), the failures SAN's
workers recorded lately, and the fast lane's missing indexes.

Cheap and safe for SAN: every query reads only active or recently failed jobs through the
recommended partial indexes (ix_san_jobs_active_covering, ix_san_jobs_failed_updated), in a
read transaction bounded by SCRAPE_LIMITS, and the endpoint caches the result (exporter.py).
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection, Select, case, func, or_, select

from batch_pipeline.fast_lane.sensors import LANE_INDEXES
from batch_pipeline.recovery.ghost_jobs import CLOSED_BY, GhostRule, is_stale, processing_since
from batch_pipeline.san.database import database_now
from batch_pipeline.san.dialects import dialect
from batch_pipeline.san.limits import WriteLimits
from batch_pipeline.san.tables import ACTIVE_STATUSES, FAILED, JOB_TYPES, PENDING, jobs

# A scrape waits for no lock and runs no statement longer than this: a slow SAN database gives
# `batch_pipeline_san_up 0` (the error logged), never a scrape that holds a connection.
SCRAPE_LIMITS = WriteLimits(lock_timeout_ms=1_000, statement_timeout_ms=3_000)
# The window of `san_jobs_failed_recent`: failures SAN's workers recorded in the last minutes.
RECENT_FAILURES_WINDOW = timedelta(minutes=10)


@dataclass(frozen=True)
class ActiveJobs:
    """The active jobs of one (job_type, status): how many are ghosts by the design's rule, and
    how long the oldest has waited (since created for PENDING, since started for PROCESSING)."""

    job_type: str
    status: str
    active: int
    stale: int
    oldest_age_seconds: float


@dataclass(frozen=True)
class SanReadings:
    active_jobs: list[ActiveJobs]
    failed_recent: dict[str, int]  # job_type -> failures in RECENT_FAILURES_WINDOW
    lane_indexes_missing: tuple[str, ...]


def _seconds_since(now: datetime, then) -> float:
    if then is None:
        return 0.0
    if isinstance(then, str):  # SQLite hands back an aggregate over a CASE as text
        then = datetime.fromisoformat(then)
    if then.tzinfo is None:
        then = then.replace(tzinfo=now.tzinfo)
    return max((now - then).total_seconds(), 0.0)


def active_jobs_query(rule: GhostRule) -> Select:
    """Counted from ix_san_jobs_active_covering alone (an index-only scan): every column it
    reads is in that index, so a reading never fetches the active jobs from the heap."""
    waiting_since = case((jobs.c.status == PENDING, jobs.c.created_at), else_=processing_since())
    return (
        select(
            jobs.c.job_type,
            jobs.c.status,
            func.count(),
            func.sum(case((is_stale(rule), 1), else_=0)),
            func.min(waiting_since),
        )
        .where(jobs.c.status.in_(ACTIVE_STATUSES))
        .group_by(jobs.c.job_type, jobs.c.status)
    )


def active_jobs(conn: Connection, now: datetime, rule: GhostRule) -> list[ActiveJobs]:
    """Every (job_type, status) of the known job types and active statuses, zeros included (a
    series that vanishes cannot be seen going to 0), plus any other job type found."""
    rows = conn.execute(active_jobs_query(rule)).all()
    found = {
        (job_type, status): ActiveJobs(
            job_type, status, int(count), int(stale or 0), _seconds_since(now, oldest)
        )
        for job_type, status, count, stale, oldest in rows
    }
    for job_type in JOB_TYPES:
        for status in ACTIVE_STATUSES:
            found.setdefault((job_type, status), ActiveJobs(job_type, status, 0, 0, 0.0))
    return [found[key] for key in sorted(found)]


def failed_recent(conn: Connection, now: datetime) -> dict[str, int]:
    """Failures SAN's workers recorded in RECENT_FAILURES_WINDOW, by job type; the ghosts
    batch_pipeline closed are not theirs and are left out."""
    counted = dict.fromkeys(JOB_TYPES, 0)
    rows = conn.execute(
        select(jobs.c.job_type, func.count())
        .where(
            jobs.c.status == FAILED,
            jobs.c.updated_at >= now - RECENT_FAILURES_WINDOW,
            or_(jobs.c.error_message.is_(None), ~jobs.c.error_message.startswith(CLOSED_BY)),
        )
        .group_by(jobs.c.job_type)
    ).all()
    counted.update({job_type: int(count) for job_type, count in rows})
    return counted


def read_san(conn: Connection) -> SanReadings:
    now = database_now(conn)
    return SanReadings(
        active_jobs=active_jobs(conn, now, GhostRule(now=now)),
        failed_recent=failed_recent(conn, now),
        lane_indexes_missing=tuple(dialect(conn).missing_valid_indexes(conn, LANE_INDEXES)),
    )
