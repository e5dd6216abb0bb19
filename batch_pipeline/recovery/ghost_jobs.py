"""Ghost jobs: PENDING > 30 min or PROCESSING > 1 h -> mark FAILED and enqueue the same
(job_type, target_id) again (the rule: ghost_rule.py; the close: ghost_closing.py).

Every job type is covered, TIL_GENERATION included. This module detects them and declares the
recovery to the registry.
"""

from dataclasses import dataclass
from datetime import datetime

import pandas as pd
from sqlalchemy import and_, case, func, select
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


def detect_stale_jobs_query(rule: GhostRule):
    stale = (
        select(
            jobs.c.id,
            jobs.c.job_type,
            jobs.c.target_id,
            jobs.c.status,
            frame_instant(
                case((jobs.c.status == PENDING, jobs.c.created_at), else_=processing_since())
            ).label("stale_since"),
        )
        .where(is_stale(rule))
        .cte("stale")
    )
    attempt = jobs.alias("attempt")
    # A join + GROUP BY rather than a correlated count: PostgreSQL hashes it when the recommended
    # index is missing instead of scanning jobs once per ghost.
    return (
        select(
            stale.c.id.label("job_id"),
            stale.c.job_type,
            stale.c.target_id,
            stale.c.status,
            stale.c.stale_since,
            func.count().label("attempts"),
        )
        .join_from(
            stale,
            attempt,
            and_(attempt.c.target_id == stale.c.target_id, attempt.c.job_type == stale.c.job_type),
        )
        .group_by(
            stale.c.id, stale.c.job_type, stale.c.target_id, stale.c.status, stale.c.stale_since
        )
        .order_by(stale.c.stale_since, stale.c.id)
    )


# With both recommended indexes, ghost detection needs no sequential scan: the partial index
# holds the active jobs, ix_san_jobs_target the attempt counts. Yet at SAN's size PostgreSQL
# prices a bitmap scan of the active jobs (a recent tail of the table) as if they were spread
# over every page, and at scale it sometimes read the whole jobs table instead
# (docs/benchmarks.md, "Figures behind the code"). So detection turns sequential scans off when
# both exist.
GHOST_DETECTION_PREFERS = (ACTIVE_JOBS_INDEX, "ix_san_jobs_target")


def detect_ghost_jobs(conn: Connection, rule: GhostRule) -> pd.DataFrame:
    """Every ghost job, oldest first, with the attempts its (job_type, target_id) has had."""
    dialect(conn).avoid_full_scans(conn, GHOST_DETECTION_PREFERS)  # transaction-local
    return GHOST_JOBS.from_rows(conn.execute(detect_stale_jobs_query(rule)))


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
        return detect_ghost_jobs(conn, self.rule(settings, now))

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
