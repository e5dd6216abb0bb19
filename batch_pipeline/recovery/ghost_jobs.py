"""Ghost jobs: PENDING > 30 min (the event was lost) or PROCESSING > 1 h (above the AI server's
call-timeout ceiling) -> mark FAILED and enqueue the same (job_type, target_id) again.

Every job type is covered, TIL_GENERATION included. A PROCESSING job's age runs from
`started_at`, or from `updated_at` when a worker never set `started_at`.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import pandas as pd
from sqlalchemy import String, and_, case, cast, func, literal, or_, select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql.elements import ColumnElement

from batch_pipeline.recovery.plan import (
    RecoveryPolicy,
    RecoveryReport,
    RecoverySettings,
    Writes,
    attempted,
    heal_ages,
    minutes,
    plan_recovery,
    planned_report,
    recognises_its_writes,
    write_recovery,
)
from batch_pipeline.san.database import read_transaction
from batch_pipeline.san.dialects import dialect, named_rows
from batch_pipeline.san.dispatch import Dispatcher, NewJob
from batch_pipeline.san.enqueue import BatchWritten, enqueue
from batch_pipeline.san.frames import INT, TEXT, UTC_DATETIME, FrameSchema, frame_instant
from batch_pipeline.san.job_source import JobSource
from batch_pipeline.san.limits import WriteLimits
from batch_pipeline.san.tables import ACTIVE_STATUSES, FAILED, PENDING, PROCESSING, jobs

AREA = "ghost_job_recovery"

# The design's thresholds: a worker takes a job right after its event, so 30 minutes in PENDING
# means the event was lost; 1 hour in PROCESSING is above the AI server's call-timeout ceiling.
STALE_PENDING_AFTER = timedelta(minutes=30)
STALE_PROCESSING_AFTER = timedelta(minutes=60)

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


@dataclass(frozen=True)
class GhostRule:
    """The rule as cut-off instants for one run."""

    now: datetime
    stale_pending_after: timedelta = STALE_PENDING_AFTER
    stale_processing_after: timedelta = STALE_PROCESSING_AFTER

    @property
    def pending_cutoff(self) -> datetime:
        return self.now - self.stale_pending_after

    @property
    def processing_cutoff(self) -> datetime:
        return self.now - self.stale_processing_after


def processing_since(table=jobs) -> ColumnElement:
    return func.coalesce(table.c.started_at, table.c.updated_at)


def is_stale(rule: GhostRule, table=jobs) -> ColumnElement:
    """PENDING created before the pending cut-off, or PROCESSING since before the processing one.

    Used both to detect and, again, inside the UPDATE that closes the job (compare-and-set): a
    job a worker took, finished or re-started in between no longer matches and is left alone.
    """
    return and_(
        table.c.status.in_(ACTIVE_STATUSES),  # lets PostgreSQL use the partial active-jobs index
        or_(
            and_(table.c.status == PENDING, table.c.created_at < rule.pending_cutoff),
            and_(table.c.status == PROCESSING, processing_since(table) < rule.processing_cutoff),
        ),
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
# over every page, and at scale 10 it sometimes read the whole jobs table instead
# (docs/benchmarks.md, "Figures behind the code"). So detection turns sequential scans off when
# both exist.
GHOST_DETECTION_PREFERS = ("ix_san_jobs_active_created", "ix_san_jobs_target")


def detect_ghost_jobs(conn: Connection, rule: GhostRule) -> pd.DataFrame:
    """Every ghost job, oldest first, with the attempts its (job_type, target_id) has had."""
    dialect(conn).prefer_index_plans(conn, GHOST_DETECTION_PREFERS)  # transaction-local
    return GHOST_JOBS.from_rows(conn.execute(detect_stale_jobs_query(rule)))


# How every ghost this recovery closes begins its error_message: with the closing instant, it
# tells a ghost this recovery closed from one a worker failed.
CLOSED_BY = "batch_pipeline ghost-job recovery"


def _failure_message(conn: Connection, rule: GhostRule) -> ColumnElement:
    def message(status: str, since: ColumnElement, threshold: timedelta) -> ColumnElement:
        # clamped: '-infinity' (or year 1) cannot be subtracted from now in minutes
        minutes_stale = cast(dialect(conn).minutes_since(rule.now, frame_instant(since)), String)
        return (
            literal(f"{CLOSED_BY}: stale in {status} for ")
            + minutes_stale
            + literal(
                f" min (threshold {minutes(threshold)} min); re-enqueued as a new job unless at "
                "max_attempts"
            )
        )

    return case(
        (jobs.c.status == PENDING, message(PENDING, jobs.c.created_at, rule.stale_pending_after)),
        else_=message(PROCESSING, processing_since(), rule.stale_processing_after),
    )


def close_stale_jobs_statement(conn: Connection, job_ids: Sequence[int], rule: GhostRule):
    """Mark the given jobs FAILED if, at this instant, they are still stale and not locked.

    A job a worker holds a lock on (it is changing it right now) is skipped, not waited for.
    Returns the rows actually closed: (id, job_type, target_id).
    """
    candidate = jobs.alias("candidate")
    still_stale = (
        select(candidate.c.id)
        .where(dialect(conn).id_in(candidate.c.id, job_ids), is_stale(rule, candidate))
        .with_for_update(skip_locked=True)
    )
    return (
        update(jobs)
        .where(jobs.c.id.in_(still_stale.scalar_subquery()), is_stale(rule))
        .values(
            status=FAILED,
            finished_at=rule.now,
            updated_at=rule.now,
            error_message=_failure_message(conn, rule),
        )
        .returning(jobs.c.id, jobs.c.job_type, jobs.c.target_id)
    )


def ghost_source(conn: Connection, job_ids: Sequence[int], rule: GhostRule) -> JobSource:
    """A batch of ghosts as the enqueue path's source: the close statement's rows are the
    targets, one replacement per (job_type, target_id), retrying the oldest ghost closed for it.
    The closed jobs were active in the statement's snapshot (the close takes only jobs stale in
    it, and again in their latest version)."""
    return JobSource(
        statement=close_stale_jobs_statement(conn, job_ids, rule),
        returned=("id", "job_type", "target_id"),
        retry_of_column="id",
        closes_active_jobs=True,
    )


def closed_at_query(conn: Connection, instant: datetime, job_ids: Sequence[int] | None = None):
    """The ghosts this recovery closed at `instant` (of `job_ids`, or all of them), each with
    the replacement it got then (None: its target was at the cap). By primary key, or by the
    closing instant through ix_san_jobs_failed_updated; the replacement through
    ix_san_jobs_target."""
    closed, replacement = jobs.alias("closed"), jobs.alias("replacement")
    return (
        select(
            closed.c.id,
            closed.c.job_type,
            closed.c.target_id,
            closed.c.error_message,
            replacement.c.id.label("new_job_id"),
        )
        .select_from(
            closed.outerjoin(
                replacement,
                and_(
                    replacement.c.target_id == closed.c.target_id,
                    replacement.c.job_type == closed.c.job_type,
                    replacement.c.retry_of_job_id == closed.c.id,
                    replacement.c.created_at == instant,
                ),
            )
        )
        .where(
            *([dialect(conn).id_in(closed.c.id, job_ids)] if job_ids is not None else []),
            closed.c.status == FAILED,
            closed.c.updated_at == instant,
            closed.c.finished_at == instant,
            closed.c.error_message.startswith(CLOSED_BY, autoescape=True),
        )
        .order_by(closed.c.id)
    )


CLOSED_COLUMNS = ("id", "job_type", "target_id", "error_message", "new_job_id")


def closed_at(
    engine: Engine, instant: datetime, limits: WriteLimits, job_ids: Sequence[int] | None = None
) -> list[tuple]:
    """`closed_at_query`'s rows (CLOSED_COLUMNS)."""
    with read_transaction(engine, limits) as conn:
        return named_rows(conn.execute(closed_at_query(conn, instant, job_ids)), CLOSED_COLUMNS)


def closed_earlier(
    engine: Engine, job_ids: Sequence[int], instant: datetime, limits: WriteLimits
) -> dict[int, int | None]:
    """Of the ghosts a write found changed, the ones an earlier attempt of the same run closed
    (every attempt stamps the run's write instant): closed job id -> its replacement's id."""
    if not job_ids:
        return {}
    return {row[0]: row[-1] for row in closed_at(engine, instant, limits, job_ids)}


def stale_status(error_message: str) -> str:
    """PENDING or PROCESSING: what this recovery's closing message says the ghost was."""
    return PENDING if error_message.startswith(f"{CLOSED_BY}: stale in {PENDING}") else PROCESSING


def recovered_entry(job_id, new_job_id, job_type, target_id, status) -> dict:
    """One ghost of the audit's `recovered` list."""
    return {
        "failed_job_id": job_id,
        "new_job_id": new_job_id,
        "job_type": job_type,
        "target_id": target_id,
        "stale_status": status,
    }


def report_of_writes_at(engine: Engine, instant: datetime, limits: WriteLimits) -> RecoveryReport:
    """What this recovery wrote at `instant` (a run's write instant), read back from SAN's rows
    alone: the audit of a run that died before it could record its own."""
    rows = closed_at(engine, instant, limits)
    report = RecoveryReport(area=AREA, dry_run=False, thresholds={})
    report.recovered = [
        recovered_entry(job_id, new_job_id, job_type, target_id, stale_status(message))
        for job_id, job_type, target_id, message, new_job_id in rows
    ]
    report.exhausted_ids = [
        entry["failed_job_id"] for entry in report.recovered if entry["new_job_id"] is None
    ]
    report.exhausted = len(report.exhausted_ids)
    report.enqueued = len(report.recovered) - report.exhausted
    report.changed_ids = [entry["failed_job_id"] for entry in report.recovered]
    report.detected = report.changed = len(report.changed_ids)
    return report


@dataclass
class ClosedBatch:
    closed_ids: list[int]
    replacements: dict[int, NewJob]  # closed job id -> its new job
    exhausted_ids: list[int]  # closed job ids whose target is at the poison cap


def close_and_replace(
    conn: Connection,
    batch: pd.DataFrame,
    rule: GhostRule,
    max_attempts: int,
    notify_channel: str | None = None,
) -> BatchWritten[ClosedBatch]:
    """One batch, in one transaction: close the ghosts and enqueue their replacements."""
    outcome = enqueue(
        conn,
        ghost_source(conn, batch["job_id"].tolist(), rule),
        now=rule.now,
        max_attempts=max_attempts,
        notify_channel=notify_channel,
    )
    exhausted = set(outcome.exhausted)
    closed = outcome.source_rows
    result = ClosedBatch(
        closed_ids=[row["id"] for row in closed],
        replacements={job.retry_of_job_id: job for job in outcome.created},
        exhausted_ids=[
            row["id"] for row in closed if (row["job_type"], row["target_id"]) in exhausted
        ],
    )
    return outcome.as_batch(result)


def recover_ghost_jobs(
    engine: Engine,
    dispatcher: Dispatcher,
    ghosts: pd.DataFrame,
    rule: GhostRule,
    policy: RecoveryPolicy = RecoveryPolicy(),
) -> RecoveryReport:
    """Close the detected ghosts and re-enqueue them, in bounded batches.

    Ghosts whose target is at the poison cap are closed without a replacement (exhausted);
    ghosts beyond the per-run cap are left untouched for the next run (deferred), so a ghost is
    never closed without its replacement.
    """
    plan = plan_recovery(ghosts, oldest_first_by=["stale_since", "job_id"], policy=policy)
    thresholds = {
        "stale_pending_after_minutes": rule.stale_pending_after.total_seconds() / 60,
        "stale_processing_after_minutes": rule.stale_processing_after.total_seconds() / 60,
    }
    report = planned_report(AREA, ghosts, plan, "job_id", thresholds, policy)
    if policy.dry_run:
        return report
    # the exhausted ghosts are closed too, without a replacement
    work = pd.concat([plan.to_enqueue, plan.exhausted])

    def complete(
        results: list[ClosedBatch], batches, recognise_earlier: bool = True
    ) -> RecoveryReport:
        new_job_of: dict[int, int] = {}
        closed_ids: set[int] = set()
        for batch in results:
            closed_ids.update(batch.closed_ids)
            new_job_of.update({closed: job.job_id for closed, job in batch.replacements.items()})
        # exhausted: the ghosts closed whose target is at the cap, as the writes found them
        report.exhausted_ids = [job_id for batch in results for job_id in batch.exhausted_ids]
        changed = [
            job_id
            for job_id in work["job_id"].iloc[: attempted(work, batches, policy)].tolist()
            if job_id not in closed_ids
        ]
        # Changed, or closed by an earlier attempt of this run: its rows say which.
        earlier = (
            closed_earlier(engine, changed, rule.now, policy.limits)
            if recognise_earlier and recognises_its_writes(ghosts, rule.now)
            else {}
        )
        closed_ids.update(earlier)
        new_job_of.update({closed: new for closed, new in earlier.items() if new is not None})
        report.exhausted_ids += [closed for closed, new in earlier.items() if new is None]
        report.written_earlier = len(earlier)
        report.exhausted = len(report.exhausted_ids)
        report.enqueued = len(new_job_of)
        report.skipped_by_race_ids = [job_id for job_id in changed if job_id not in earlier]
        report.skipped_by_race = len(report.skipped_by_race_ids)
        closed = work[work["job_id"].isin(closed_ids)]
        report.heal_ages_seconds = heal_ages(
            closed.loc[closed["job_id"].isin(new_job_of), "stale_since"], rule.now
        )
        report.recovered = [
            recovered_entry(job_id, new_job_of.get(job_id), job_type, target_id, status)
            # .tolist() gives plain ints and strs; iterating the frame row by row boxes every value
            for job_id, job_type, target_id, status in zip(
                closed["job_id"].tolist(),
                closed["job_type"].tolist(),
                closed["target_id"].tolist(),
                closed["status"].tolist(),
                strict=True,
            )
        ]
        report.changed = len(closed_ids)
        report.changed_ids = sorted(closed_ids)
        report.batches = batches.batches
        report.announce_failures = batches.announce_failures
        return report

    def write_batch(conn: Connection, batch: pd.DataFrame) -> BatchWritten[ClosedBatch]:
        return close_and_replace(
            conn, batch, rule, policy.max_attempts, dispatcher.statement_channel
        )

    writes = Writes(
        work,
        write_batch,
        complete,
        # a batch failed: the database may be gone; the retry recognises what committed
        complete_partial=lambda results, batches: complete(results, batches, False),
    )
    return write_recovery(engine, dispatcher, writes, policy)


@dataclass(frozen=True)
class GhostJobRecovery:
    """Ghost-job recovery as the registry sees it: the same face as a TargetRecovery."""

    area: str = AREA
    name: str = "ghost_jobs"
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
