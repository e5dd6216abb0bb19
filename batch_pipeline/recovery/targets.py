"""The mechanism of every recovery but the ghost jobs: a target row still needs the work of one
job type and has no active job of that type -> enqueue that job for it.

A recovery of this shape is a declaration (`TargetRecovery`): the target table, the "needs
work" predicate, the job type, the frame's columns and the report's keys are data. The rules
themselves live in orphan_scraps.py, unrefined_scraps.py and unwritten_tils.py; they stay
separate recoveries, with their own assets, because the design keeps their nature and policy
apart even where the mechanics are the same.
"""

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pandas as pd
from sqlalchemy import Table, and_, exists, func, select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql.elements import ColumnElement

from batch_pipeline.recovery.plan import (
    RecoveryReport,
    RecoverySettings,
    minutes,
)
from batch_pipeline.recovery.target_writes import recover_targets, report_of_writes_at
from batch_pipeline.san.dialects import dialect
from batch_pipeline.san.dispatch import Dispatcher
from batch_pipeline.san.frames import INT, UTC_DATETIME, FrameSchema, frame_instant
from batch_pipeline.san.job_source import Eligibility, EnqueueRequest, JobSource
from batch_pipeline.san.limits import WriteLimits
from batch_pipeline.san.sweep import (
    CHUNK_AFTER,
    CHUNK_UPTO,
    Bound,
    chunk_range,
    swept,
    with_sweep_pacing,
)
from batch_pipeline.san.tables import holds_its_target, jobs

LOG = logging.getLogger(__name__)

# The design's grace: a target younger than this may still be getting its job from the app.
ORPHAN_MIN_AGE = timedelta(minutes=10)


@dataclass(frozen=True)
class TargetRecovery:
    """One recovery of the shape "target needs work + no active job -> enqueue(job_type)"."""

    area: str  # the asset key of its audit trail
    name: str  # its ops are detect_<name> and recover_<name>
    noun: str  # what it heals, in the plural: "orphan scraps"
    table: Table  # the target table; jobs.target_id is its id
    job_type: str  # the job that does the missing work
    needs_work: ColumnElement  # a condition on `table`: the work is still missing
    needs_work_text: str  # the same, in words, for descriptions: "with no knowledge card"
    done_text: str  # its opposite, for explain's verdict: "has its knowledge card"
    id_key: str  # the target's id in the frame and the audit trail: "scrap_id", "summary_id"
    frame_name: str
    # Columns of `table` carried into the frame, besides the id and the grace column.
    carried_columns: tuple[str, ...] = ("user_id",)
    grace_column: str = "created_at"  # younger than the grace: left alone
    # Whether `scrap_lookback_hours` applies (a created_at index range instead of a full sweep).
    uses_scrap_lookback: bool = False
    # The same condition as a probe per row, for look-back windows, when needs_work is the
    # absence of a row elsewhere: as an anti-join PostgreSQL may hash the whole other table.
    needs_work_per_row: ColumnElement | None = None
    # The same condition for the targets with ids in (after, upto], when needs_work is the
    # absence of a row elsewhere: bounded on that row's key too, so that a sweep's chunk reads
    # that range of both tables (PostgreSQL does not carry a range across a join).
    needs_work_between: Callable[[Bound, Bound], ColumnElement] | None = None
    # Indexes whose presence makes the full sweep's index plan the better one, although the
    # planner prices it about even with sequential scans (see
    # dialects.postgresql.catalog.avoid_full_scans).
    full_sweep_prefers: tuple[str, ...] = ()
    extension: bool = False  # this project's addition to the design, not one of its services
    frame: FrameSchema = field(init=False)

    def __post_init__(self):
        columns = {
            self.id_key: INT,
            **{name: INT for name in self.carried_columns},
            self.grace_column: UTC_DATETIME,
            "attempts": INT,
            "waiting_since": UTC_DATETIME,
        }
        object.__setattr__(
            self, "frame", FrameSchema(self.frame_name, self.detect_description, columns)
        )

    # -- descriptions, built from the declaration -------------------------------------------
    @property
    def rule_text(self) -> str:
        return (
            f"{self.table.name} {self.needs_work_text} + no active {self.job_type} job"
            f" -> enqueue({self.job_type})"
        )

    @property
    def detect_description(self) -> str:
        return (
            f"Rows of {self.table.name} {self.needs_work_text} and no active {self.job_type} job, "
            "older "
            f"than the grace (orphan_min_age_minutes, default {minutes(ORPHAN_MIN_AGE)} min)."
        )

    @property
    def recover_description(self) -> str:
        return (
            f"Enqueue {self.job_type} for the detected {self.table.name}, oldest first,"
            " in bounded batches."
        )

    @property
    def asset_description(self) -> str:
        extension = " (batch_pipeline's extension of the design)" if self.extension else ""
        return (
            f"{self.rule_text}{extension}. Metadata: counts per run and the {self.id_key}"
            " -> new job ids."
        )

    @property
    def eligibility(self) -> Eligibility:
        """The write-time re-check: the target still needs the work."""
        return Eligibility(self.table, self.needs_work)

    def job_source(self, target_ids: Sequence[int]) -> JobSource:
        """A write batch: these targets, re-checked at write time (a worker may have done the
        work since detection)."""
        return JobSource(
            job_type=self.job_type,
            requests=[EnqueueRequest(i) for i in target_ids],
            eligibility=self.eligibility,
        )

    # -- what the Dagster ops call -----------------------------------------------------------
    def report_of_writes_at(
        self, engine: Engine, instant: datetime, limits: WriteLimits
    ) -> RecoveryReport:
        """What this recovery wrote at `instant` (a run's write instant), from SAN's rows."""
        return report_of_writes_at(self, engine, instant, limits)

    def detect(self, conn: Connection, settings: RecoverySettings, now: datetime) -> pd.DataFrame:
        lookback = settings.scrap_lookback if self.uses_scrap_lookback else None
        return detect_targets(
            conn,
            self,
            now=now,
            min_age=settings.orphan_min_age,
            lookback=lookback,
            limits=settings.policy.limits,
        )

    def recover(
        self,
        engine: Engine,
        dispatcher: Dispatcher,
        candidates: pd.DataFrame,
        settings: RecoverySettings,
        now: datetime,
    ) -> RecoveryReport:
        thresholds = {"orphan_min_age_minutes": settings.orphan_min_age_minutes}
        if self.uses_scrap_lookback:
            thresholds["scrap_lookback_hours"] = settings.scrap_lookback_hours
        return recover_targets(
            engine,
            dispatcher,
            self,
            candidates,
            now=now,
            thresholds=thresholds,
            policy=settings.policy,
        )


def has_active_job(
    job_type: str, table: Table, between: tuple[Bound, Bound] | None = None
) -> ColumnElement:
    """A job of `job_type` for the current row of `table` still holds it (any status but
    COMPLETED and FAILED: see schema.holds_its_target); `between`: the rows' ids are in that
    range (after, upto], and so are the jobs' targets read."""
    return exists().where(
        jobs.c.job_type == job_type,
        jobs.c.target_id == table.c.id,
        holds_its_target(jobs.c.status),
        *in_range(jobs.c.target_id, between),
    )


def in_range(column: ColumnElement, between: tuple[Bound, Bound] | None) -> list[ColumnElement]:
    """`column` in (after, upto], or no condition."""
    return [] if between is None else [column > between[0], column <= between[1]]


def needs_work_in(
    recovery: TargetRecovery, narrowed: bool, ids_between: tuple[Bound, Bound] | None
) -> ColumnElement:
    """The recovery's condition for a narrowed set of targets (a probe per row) or a sweep's
    chunk (bounded on the other table's key too), else its set-based one."""
    if ids_between is not None and recovery.needs_work_between is not None:
        return recovery.needs_work_between(*ids_between)
    if narrowed and recovery.needs_work_per_row is not None:
        return recovery.needs_work_per_row
    return recovery.needs_work


def detect_query(
    recovery: TargetRecovery,
    created_before: datetime,
    created_since: datetime | None = None,
    among: ColumnElement | None = None,
    latest_attempt: bool = False,
    ids_between: tuple[Bound, Bound] | None = None,
):
    """The targets that need the work and have no active job, with their attempts so far and
    `waiting_since`: the target's grace column (saved at), or with `latest_attempt` when its
    latest attempt ended if it had one. `among` narrows the targets (the fast lane: those with
    a recent failure). `latest_attempt` reads each attempt's row (updated_at is not in
    ix_san_jobs_target): the fast lane's few targets only; over a whole sweep PostgreSQL would
    rather read every job (see `last_failures`)."""
    # An active job's target is ghost recovery's; one inside the grace may still get the app's.
    table = recovery.table
    grace = table.c[recovery.grace_column]
    window = [grace < created_before]
    if created_since is not None:  # a look-back window: an index range instead of a full sweep
        window.append(grace >= created_since)
    if among is not None:
        window.append(among)
    if ids_between is not None:  # a sweep's chunk (san/sweep.py)
        window += in_range(table.c.id, ids_between)
    narrowed = created_since is not None or among is not None
    needs_work = needs_work_in(recovery, narrowed, ids_between)
    candidates = (
        select(
            table.c.id.label(recovery.id_key),
            *(table.c[name] for name in recovery.carried_columns),
            frame_instant(grace).label(recovery.grace_column),
        )
        .where(needs_work, ~has_active_job(recovery.job_type, table, ids_between), *window)
        .cte("candidates")
    )
    attempt = jobs.alias("attempt")
    target = candidates.c[recovery.id_key]
    return (
        select(
            candidates,
            func.count(attempt.c.target_id).label("attempts"),
            (
                frame_instant(
                    func.coalesce(
                        func.max(attempt.c.updated_at), candidates.c[recovery.grace_column]
                    )
                )
                if latest_attempt
                else candidates.c[recovery.grace_column]
            ).label("waiting_since"),
        )
        .select_from(
            candidates.outerjoin(
                attempt,
                and_(attempt.c.target_id == target, attempt.c.job_type == recovery.job_type),
            )
        )
        .group_by(*candidates.c)
        .order_by(candidates.c[recovery.grace_column], target)
    )


def chunk_query(recovery: TargetRecovery, created_before: datetime):
    """A full sweep's chunk statement, built once per sweep: each chunk binds its id range
    (`chunk_range` in san/sweep.py) instead of building and keying the statement anew."""
    return detect_query(
        recovery, created_before=created_before, ids_between=(CHUNK_AFTER, CHUNK_UPTO)
    )


def detect_targets(
    conn: Connection,
    recovery: TargetRecovery,
    *,
    now: datetime,
    min_age: timedelta = ORPHAN_MIN_AGE,
    lookback: timedelta | None = None,
    limits: WriteLimits = WriteLimits(),
) -> pd.DataFrame:
    """Targets older than `min_age` (and, with a `lookback`, younger than it) that need
    `recovery.job_type` and have no active job of that type, oldest first. A look-back window is
    one index range; without one the whole table is swept in keyset chunks of ids, paced by the
    throttle (san/sweep.py): see docs/benchmarks.md for the cost at scale."""
    created_before = now - min_age
    if lookback is not None:
        query = detect_query(recovery, created_before=created_before, created_since=now - lookback)
        return recovery.frame.from_rows(conn.execute(query))
    dialect(conn).avoid_full_scans(conn, recovery.full_sweep_prefers)  # transaction-local
    chunk = chunk_query(recovery, created_before)
    rows, pacing = swept(
        conn,
        recovery.table.c.id,
        lambda after, upto: conn.execute(chunk, chunk_range(after, upto)).all(),
        limits,
    )
    frame = recovery.frame.from_rows(rows)
    ordered = frame.sort_values([recovery.grace_column, recovery.id_key], kind="stable")
    return with_sweep_pacing(ordered.reset_index(drop=True), pacing)
