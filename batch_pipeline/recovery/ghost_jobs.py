"""Ghost jobs: PENDING > 30 min or PROCESSING > 1 h -> mark FAILED and enqueue the same
(job_type, target_id) again (the rule: ghost_rule.py; the close: ghost_closing.py).

Every job type is covered, TIL_GENERATION included. This module detects them and declares the
recovery to the registry.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import pandas as pd
from sqlalchemy import case, func, select
from sqlalchemy.engine import Connection, Engine

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
from batch_pipeline.san.frames import INT, TEXT, UTC_DATETIME, FrameSchema, frame_instant
from batch_pipeline.san.indexes import ACTIVE_JOBS_INDEX
from batch_pipeline.san.limits import WriteLimits
from batch_pipeline.san.sweep import swept_among, with_sweep_pacing
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
    "attempts_query",
    "detect_ghost_jobs",
    "stale_jobs_query",
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


def stale_jobs_query(rule: GhostRule):
    """The ghosts themselves, oldest first: a read of the few active jobs (the partial index),
    not of the jobs history."""
    stale_since = frame_instant(
        case((jobs.c.status == PENDING, jobs.c.created_at), else_=processing_since())
    ).label("stale_since")
    return (
        select(jobs.c.id, jobs.c.job_type, jobs.c.target_id, jobs.c.status, stale_since)
        .where(is_stale(rule))
        .order_by(stale_since, jobs.c.id)
    )


def attempts_query(bind: Connection | Engine, target_ids: Sequence[int]):
    """The attempts so far of every job type on `target_ids`: an index-only lookup per target
    in ix_san_jobs_target."""
    return (
        select(jobs.c.target_id, jobs.c.job_type, func.count())
        .where(dialect(bind).id_in(jobs.c.target_id, target_ids))
        .group_by(jobs.c.target_id, jobs.c.job_type)
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
    """Every ghost job, oldest first, with the attempts its (job_type, target_id) has had.

    Two reads, so no statement of ours holds a core for long: the ghosts in one statement
    (34 ms for 25,000 at scale 1), then their attempts, a chunk of targets a statement under the
    throttle (san/sweep.py). One statement counting both took 270-390 ms at scale 1 under load.
    """
    dialect(conn).avoid_full_scans(conn, GHOST_DETECTION_PREFERS)  # transaction-local
    ghosts = conn.execute(stale_jobs_query(rule)).all()
    targets = sorted({ghost.target_id for ghost in ghosts})
    counted, pacing = swept_among(
        conn, targets, lambda chunk: conn.execute(attempts_query(conn, chunk)).all(), limits
    )
    attempts = {(target_id, job_type): count for target_id, job_type, count in counted}
    # A ghost is an attempt itself: at least 1, even if its row changed between the two reads.
    frame = GHOST_JOBS.from_rows(
        (*ghost, attempts.get((ghost.target_id, ghost.job_type), 1)) for ghost in ghosts
    )
    return with_sweep_pacing(frame, pacing)


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
