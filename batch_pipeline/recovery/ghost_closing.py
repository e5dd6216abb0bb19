"""Closing ghosts: each one FAILED (if, at that instant, it is still stale and no worker holds
it) and replaced by a new job in the same statement, in bounded batches; and, from SAN's rows,
what a run closed at its write instant (its audit, recovered after a crash).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import pandas as pd
from sqlalchemy import String, and_, case, cast, literal, select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql.elements import ColumnElement

from batch_pipeline.recovery.ghost_rule import (
    AREA,
    CLOSED_BY,
    GhostRule,
    is_stale,
    processing_since,
)
from batch_pipeline.recovery.plan import (
    RecoveryPolicy,
    RecoveryReport,
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
from batch_pipeline.san.frames import frame_instant
from batch_pipeline.san.job_source import JobSource
from batch_pipeline.san.limits import WriteLimits
from batch_pipeline.san.tables import FAILED, PENDING, PROCESSING, jobs


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
    run = GhostWrites(engine, ghosts, pd.concat([plan.to_enqueue, plan.exhausted]), rule, policy)

    def write_batch(conn: Connection, batch: pd.DataFrame) -> BatchWritten[ClosedBatch]:
        return close_and_replace(
            conn, batch, rule, policy.max_attempts, dispatcher.statement_channel
        )

    writes = Writes(
        run.work,
        write_batch,
        lambda results, batches: run.complete(report, results, batches),
        # a batch failed: the database may be gone; the retry recognises what committed
        complete_partial=lambda results, batches: run.complete(report, results, batches, False),
    )
    return write_recovery(engine, dispatcher, writes, policy)


@dataclass(frozen=True)
class GhostWrites:
    """One run's ghost writes: what it detected, what it set out to close, under which rule."""

    engine: Engine
    ghosts: pd.DataFrame
    work: pd.DataFrame
    rule: GhostRule
    policy: RecoveryPolicy

    def complete(
        self, report: RecoveryReport, results: list[ClosedBatch], batches, recognise_earlier=True
    ) -> RecoveryReport:
        """`report` filled from what the committed batches did (and, recognised in SAN's rows
        by the run's write instant, what an earlier attempt of the step did)."""
        new_job_of: dict[int, int] = {}
        closed_ids: set[int] = set()
        for batch in results:
            closed_ids.update(batch.closed_ids)
            new_job_of.update({closed: job.job_id for closed, job in batch.replacements.items()})
        # exhausted: the ghosts closed whose target is at the cap, as the writes found them
        report.exhausted_ids = [job_id for batch in results for job_id in batch.exhausted_ids]
        attempted_ids = self.work["job_id"].iloc[: attempted(self.work, batches, self.policy)]
        changed = [job_id for job_id in attempted_ids.tolist() if job_id not in closed_ids]
        # Changed, or closed by an earlier attempt of this run: its rows say which.
        earlier = (
            closed_earlier(self.engine, changed, self.rule.now, self.policy.limits)
            if recognise_earlier and recognises_its_writes(self.ghosts, self.rule.now)
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
        closed = self.work[self.work["job_id"].isin(closed_ids)]
        report.heal_ages_seconds = heal_ages(
            closed.loc[closed["job_id"].isin(new_job_of), "stale_since"], self.rule.now
        )
        report.recovered = recovered_entries(closed, new_job_of)
        report.changed = len(closed_ids)
        report.changed_ids = sorted(closed_ids)
        report.batches = batches.batches
        report.throttle = batches.throttle.metadata()
        report.announce_failures = batches.announce_failures
        return report


def recovered_entries(closed: pd.DataFrame, new_job_of: dict[int, int]) -> list[dict]:
    return [
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
