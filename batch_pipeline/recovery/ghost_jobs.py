"""Ghost jobs: PENDING > 30 min or PROCESSING > 1 h -> mark FAILED and enqueue the same
(job_type, target_id) again (the rule: ghost_rule.py; the close: ghost_closing.py).

Every job type is covered, TIL_GENERATION included. This module detects them and declares the
recovery to the registry.
"""

from dataclasses import dataclass
from datetime import datetime

import pandas as pd
from sqlalchemy import and_, case, func, select, tuple_
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql.elements import ColumnElement

from batch_pipeline.recovery.ghost_closing import recover_ghost_jobs, report_of_writes_at
from batch_pipeline.recovery.ghost_rule import (
    AREA,
    CLOSED_BY,
    STALE_PENDING_AFTER,
    STALE_PROCESSING_AFTER,
    GhostRule,
    is_stale,
    processing_since,
)
from batch_pipeline.recovery.plan import (
    RecoveryReport,
    RecoverySettings,
    minutes,
)
from batch_pipeline.san.dialects import dialect
from batch_pipeline.san.dispatch import Dispatcher
from batch_pipeline.san.frames import (
    INT,
    TEXT,
    UTC_DATETIME,
    FrameSchema,
    frame_instant,
    in_frame,
)
from batch_pipeline.san.indexes import ACTIVE_JOBS_INDEX
from batch_pipeline.san.limits import WriteLimits
from batch_pipeline.san.sweep import swept_after, with_sweep_pacing
from batch_pipeline.san.tables import PENDING, jobs

# The rule, re-exported: this module is the recovery as the rest of the code names it.
__all__ = [
    "AREA",
    "CLOSED_BY",
    "STALE_PENDING_AFTER",
    "STALE_PROCESSING_AFTER",
    "GhostRule",
    "is_stale",
    "processing_since",
    "GHOST_DETECTION_PREFERS",
    "GHOST_JOBS",
    "GHOST_JOB_RECOVERY",
    "GhostJobRecovery",
    "detect_ghost_jobs",
    "detect_stale_jobs_query",
]

GHOST_JOBS = FrameSchema(
    name="GhostJobs",
    description="Jobs stuck in PENDING or PROCESSING past their threshold, with their attempts so "
    "far.",
    columns={
        "job_id": INT,
        "job_type": TEXT,
        "target_id": INT,
        "status": TEXT,
        "stale_since": UTC_DATETIME,
        "attempts": INT,
    },
)


def detect_stale_jobs_query(rule: GhostRule, *where: ColumnElement, limit: int | None = None):
    """The ghosts with their attempts, and each one's created_at last (a chunk's key), in
    (created_at, id) order: all of them, or those `where` also holds, at most `limit` (a chunk
    of san/sweep.py: a range of the active jobs' partial index)."""
    stale = (
        select(
            jobs.c.id,
            jobs.c.job_type,
            jobs.c.target_id,
            jobs.c.status,
            frame_instant(
                case((jobs.c.status == PENDING, jobs.c.created_at), else_=processing_since())
            ).label("stale_since"),
            frame_instant(jobs.c.created_at).label("created_at"),  # as the frame holds it
        )
        .where(is_stale(rule), *where)
        .order_by(jobs.c.created_at, jobs.c.id)
        .limit(limit)
        .cte("stale")
    )
    attempt = jobs.alias("attempt")
    # A join + GROUP BY rather than a correlated count: PostgreSQL hashes it when the recommended
    # index is missing instead of scanning jobs once per ghost.
    columns = (stale.c.id, stale.c.job_type, stale.c.target_id, stale.c.status, stale.c.stale_since)
    return (
        select(
            stale.c.id.label("job_id"),
            *columns[1:],
            func.count().label("attempts"),
            stale.c.created_at,
        )
        .join_from(
            stale,
            attempt,
            and_(attempt.c.target_id == stale.c.target_id, attempt.c.job_type == stale.c.job_type),
        )
        .group_by(*columns, stale.c.created_at)
        .order_by(stale.c.created_at, stale.c.id)
    )


IN_FRAME = in_frame(jobs.c.created_at)


def past(after: tuple[datetime, int] | None) -> tuple[ColumnElement, ...]:
    """The active jobs past `after` in (created_at, id) order (None: from the first)."""
    if after is None:
        return ()
    return (
        jobs.c.created_at >= after[0],  # the index's range; the tuple breaks its ties
        tuple_(jobs.c.created_at, jobs.c.id) > tuple_(*after),
    )


# With both recommended indexes, ghost detection needs no sequential scan: the partial index
# holds the active jobs, ix_san_jobs_target the attempt counts. Yet at SAN's size PostgreSQL
# prices a bitmap scan of the active jobs (a recent tail of the table) as if they were spread
# over every page, and at scale it sometimes read the whole jobs table instead
# (docs/benchmarks.md, "Figures behind the code"). So detection turns sequential scans off when
# both exist.
GHOST_DETECTION_PREFERS = (ACTIVE_JOBS_INDEX, "ix_san_jobs_target")


def detect_ghost_jobs(
    conn: Connection, rule: GhostRule, limits: WriteLimits = WriteLimits()
) -> pd.DataFrame:
    """Every ghost job, oldest first, with the attempts its (job_type, target_id) has had. With
    the active jobs' index they are read in chunks of it paced by the throttle (san/sweep.py):
    one statement for 25,000 ghosts took 270-390 ms at scale 1 under load; without the index,
    one statement (each chunk would scan the table)."""
    dialect(conn).avoid_full_scans(conn, GHOST_DETECTION_PREFERS)  # transaction-local
    pacing = None
    if dialect(conn).missing_valid_indexes(conn, [ACTIVE_JOBS_INDEX]):
        rows = conn.execute(detect_stale_jobs_query(rule)).all()
    else:  # a key Python can hold: the few instants it cannot ('-infinity') in one statement
        rows, pacing = swept_after(
            conn,
            None,
            lambda after, limit: conn.execute(
                detect_stale_jobs_query(rule, IN_FRAME, *past(after), limit=limit)
            ).all(),
            lambda row: (row.created_at, row.job_id),
            limits,
        )
        rows += conn.execute(detect_stale_jobs_query(rule, ~IN_FRAME)).all()
    frame = GHOST_JOBS.from_rows(row[: len(GHOST_JOBS.columns)] for row in rows)
    ordered = frame.sort_values(["stale_since", "job_id"], kind="stable").reset_index(drop=True)
    return ordered if pacing is None else with_sweep_pacing(ordered, pacing)


@dataclass(frozen=True)
class GhostJobRecovery:
    """Ghost-job recovery as the registry sees it: the same face as a TargetRecovery."""

    area: str = AREA
    name: str = "ghost_jobs"
    noun: str = "ghost jobs"
    id_key: str = "job_id"
    frame: FrameSchema = GHOST_JOBS
    extension: bool = False

    @property
    def rule_text(self) -> str:
        return (
            f"jobs PENDING > {minutes(STALE_PENDING_AFTER)} min / PROCESSING > "
            f"{minutes(STALE_PROCESSING_AFTER)} min -> mark FAILED + enqueue again"
        )

    @property
    def detect_description(self) -> str:
        return (
            f"Jobs stuck in PENDING (default > {minutes(STALE_PENDING_AFTER)} min, by created_at) "
            "or "
            f"PROCESSING (default > {minutes(STALE_PROCESSING_AFTER)} min, by started_at), with "
            "their attempts."
        )

    @property
    def recover_description(self) -> str:
        return (
            "Close each ghost as FAILED and enqueue its replacement, in one transaction per batch."
        )

    @property
    def asset_description(self) -> str:
        return (
            f"Ghost {self.rule_text}. Metadata: counts per run and the failed -> new job id pairs."
        )

    def report_of_writes_at(
        self, engine: Engine, instant: datetime, limits: WriteLimits
    ) -> RecoveryReport:
        """What this recovery wrote at `instant` (a run's write instant), from SAN's rows."""
        return report_of_writes_at(engine, instant, limits)

    def rule(self, settings: RecoverySettings, now: datetime) -> GhostRule:
        return GhostRule(now, settings.stale_pending_after, settings.stale_processing_after)

    def detect(self, conn: Connection, settings: RecoverySettings, now: datetime) -> pd.DataFrame:
        return detect_ghost_jobs(conn, self.rule(settings, now), settings.policy.limits)

    def recover(
        self,
        engine: Engine,
        dispatcher: Dispatcher,
        candidates: pd.DataFrame,
        settings: RecoverySettings,
        now: datetime,
    ) -> RecoveryReport:
        return recover_ghost_jobs(
            engine, dispatcher, candidates, self.rule(settings, now), settings.policy
        )


GHOST_JOB_RECOVERY = GhostJobRecovery()
