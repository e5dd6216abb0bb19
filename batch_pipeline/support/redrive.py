"""Redrive: one more job, beyond the poison cap, for exhausted targets an operator names (after
the bug that made them fail is fixed).

How the cap counts a redrive: every job counts, the redriven one too. A target at the cap has
`attempts` >= max_attempts jobs; a redrive enqueues exactly one more, through the one enqueue
path with max_attempts = attempts + 1: if anything gave the target a job since it was read (a
second redrive, a worker, the app), the write finds attempts + 1 jobs and creates none. While
the redriven job is active, the target has an active job: no recovery touches it (the fast lane
announces it again if its event is lost, the ghost rule closes it only if it goes stale). If it
fails, the target has more than max_attempts jobs and is exhausted again: one redrive, one
chance; the exhausted_targets check names it once more.

Plain functions over SQLAlchemy; assets.py runs them in redrive_job.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import groupby

import pandas as pd
from sqlalchemy import select
from sqlalchemy.engine import Connection, Engine

from batch_pipeline.recovery.plan import RecoveryPolicy, Writes, attempted, write_recovery
from batch_pipeline.recovery.targets import TargetRecovery, detect_query
from batch_pipeline.san.audit import capped_ids
from batch_pipeline.san.dialects import dialect, named_rows
from batch_pipeline.san.dispatch import Dispatcher, NewJob
from batch_pipeline.san.enqueue import BatchWritten, enqueue_jobs
from batch_pipeline.san.job_source import EnqueueRequest
from batch_pipeline.san.limits import WriteLimits
from batch_pipeline.san.tables import FAILED, jobs

# Targets redriven per run at most, oldest first, unless the run asks for fewer.
DEFAULT_LIMIT = 100


@dataclass(frozen=True)
class RedriveFilter:
    """Which exhausted targets of one recovery area get another job."""

    target_ids: tuple[int, ...] = ()  # empty: every exhausted target
    failed_since: datetime | None = None  # the latest failure at or after this
    error_message_contains: str | None = None  # in the latest failure's error (any case)
    limit: int = DEFAULT_LIMIT

    def words(self) -> str:
        said = [f"ids {', '.join(map(str, self.target_ids))}"] if self.target_ids else []
        if self.failed_since:
            said.append(f"failed since {self.failed_since.isoformat()}")
        if self.error_message_contains:
            said.append(f"error containing {self.error_message_contains!r}")
        return "; ".join(said) or "every exhausted target"


def exhausted_targets(
    conn: Connection,
    recovery: TargetRecovery,
    now: datetime,
    chosen: RedriveFilter,
    *,
    max_attempts: int,
    grace,
) -> pd.DataFrame:
    """The recovery's exhausted targets matching `chosen`, oldest latest failure first: they
    still need the work, have no active job, are past the grace and have >= max_attempts jobs
    (recovery_job's own detection, narrowed to targets with a failed job), with their latest
    failure's job id, time and error. Every match: the limit is the caller's."""
    if not max_attempts:  # unlimited attempts: nothing is exhausted
        return _with_failures(recovery.frame.from_rows([]), [])
    failed = select(jobs.c.target_id).where(
        jobs.c.status == FAILED, jobs.c.job_type == recovery.job_type
    )
    if chosen.failed_since is not None:
        failed = failed.where(jobs.c.updated_at >= chosen.failed_since)
    if chosen.target_ids:
        failed = failed.where(dialect(conn).id_in(jobs.c.target_id, list(chosen.target_ids)))
    failed_ids = list(conn.execute(failed.distinct()).scalars())
    if not failed_ids:
        return _with_failures(recovery.frame.from_rows([]), [])
    table = recovery.table
    found = recovery.frame.from_rows(
        conn.execute(
            detect_query(
                recovery,
                created_before=now - grace,
                among=dialect(conn).id_in(table.c.id, failed_ids),
                latest_attempt=True,
            )
        )
    )
    found = found[found["attempts"] >= max_attempts]
    latest = named_rows(
        conn.execute(
            select(jobs.c.target_id, jobs.c.id, jobs.c.updated_at, jobs.c.error_message)
            .where(
                jobs.c.status == FAILED,
                jobs.c.job_type == recovery.job_type,
                dialect(conn).id_in(jobs.c.target_id, found[recovery.id_key].tolist() or [-1]),
            )
            .order_by(jobs.c.target_id, jobs.c.id)
        ),
        ("target_id", "id", "updated_at", "error_message"),
    )
    found = _with_failures(found, latest, recovery.id_key)
    if chosen.failed_since is not None:
        found = found[found["last_failed_at"] >= pd.Timestamp(chosen.failed_since)]
    if chosen.error_message_contains:
        found = found[
            found["last_error"].str.contains(chosen.error_message_contains, case=False, regex=False)
        ]
    return found.sort_values(["last_failed_at", recovery.id_key], kind="stable").reset_index(
        drop=True
    )


def nothing_matches(recovery: TargetRecovery, chosen: RedriveFilter, max_attempts: int) -> str:
    return (
        f"nothing to redrive: no exhausted target of {recovery.area} (max_attempts "
        f"{max_attempts}) matches {chosen.words()}"
    )


def _with_failures(found: pd.DataFrame, latest, id_key: str | None = None) -> pd.DataFrame:
    """`found` with each target's latest failed job: last_job_id, last_failed_at, last_error."""
    last = {row[0]: row[1:] for row in latest}  # ordered by id: the latest wins
    found = found.copy()
    keys = found[id_key] if id_key else pd.Series([], dtype="int64")
    found["last_job_id"] = [last.get(t, (None,))[0] for t in keys]
    found["last_failed_at"] = pd.to_datetime(
        [last.get(t, (None, None))[1] for t in keys], utc=True, errors="coerce"
    )
    found["last_error"] = [last.get(t, (None, None, None))[2] or "" for t in keys]
    return found


@dataclass
class RedriveReport:
    area: str
    dry_run: bool
    filter: str
    max_attempts: int
    matched: int = 0  # exhausted targets matching the filter
    over_limit: int = 0  # matched beyond the limit: not redriven by this run
    redriven: list[dict] = field(default_factory=list)  # area, target_id, new_job_id, ...
    would_redrive: list[dict] = field(default_factory=list)  # a dry run's
    skipped_by_race_ids: list[int] = field(default_factory=list)
    announce_failures: int = 0
    asked_by: str = ""
    reason: str = ""

    def metadata(self) -> dict:
        return {
            "area": self.area,
            "matched": self.matched,
            "redriven_count": len(self.redriven),
            "over_limit": self.over_limit,
            "skipped_by_race": len(self.skipped_by_race_ids),
            "announce_failures": self.announce_failures,
            "dry_run": self.dry_run,
            "filter": self.filter,
            "max_attempts": self.max_attempts,
            "asked_by": self.asked_by,
            "reason": self.reason,
            **capped_ids(
                redriven=self.redriven,
                would_redrive=self.would_redrive,
                skipped_by_race_ids=self.skipped_by_race_ids,
            ),
        }


def _pair(recovery: TargetRecovery, row, new_job_id: int | None) -> dict:
    return {
        "area": recovery.area,
        "target_id": int(row.target),
        "new_job_id": new_job_id,
        "attempts_before": int(row.attempts),
        "last_job_id": None if pd.isna(row.last_job) else int(row.last_job),
        "last_error": (row.error or "")[:200],
    }


def _retry_of(last_job) -> int | None:
    return None if pd.isna(last_job) else int(last_job)


def enqueue_one_more(
    conn: Connection, recovery: TargetRecovery, batch: Sequence, now: datetime, channel
) -> BatchWritten[list[NewJob]]:
    """One batch of a redrive: each target one job beyond the attempts it was read with."""
    created: list[NewJob] = []
    announced = True
    by_attempts = sorted(batch, key=lambda row: int(row.attempts))
    for attempts, group in groupby(by_attempts, key=lambda row: int(row.attempts)):
        outcome = enqueue_jobs(
            conn,
            recovery.job_type,
            [EnqueueRequest(int(row.target), _retry_of(row.last_job)) for row in group],
            now=now,
            max_attempts=attempts + 1,  # exactly one job beyond what it had
            eligibility=recovery.eligibility,
            notify_channel=channel,
        )
        created += outcome.created
        announced = announced and (outcome.announced or not outcome.created)
    return BatchWritten(created, created, announced and bool(created))


def redrive(
    engine: Engine,
    dispatcher: Dispatcher,
    recovery: TargetRecovery,
    targets: pd.DataFrame,
    now: datetime,
    report: RedriveReport,
    *,
    batch_size: int | None = None,
    limits: WriteLimits = WriteLimits(),
) -> RedriveReport:
    """One new job per target of `targets` (exhausted_targets' rows, already cut to the
    limit), retrying its latest failed job, in bounded batches: each target only if, at write
    time, it still needs the work, has no active job and has exactly the attempts it was read
    with (the enqueue path re-checks all three; max_attempts = attempts + 1)."""
    rows = list(
        targets.rename(
            columns={
                recovery.id_key: "target",
                "last_job_id": "last_job",
                "last_error": "error",
            }
        )[["target", "attempts", "last_job", "error"]].itertuples(index=False)
    )
    if report.dry_run:
        report.would_redrive = [_pair(recovery, row, None) for row in rows]
        return report

    def write_batch(conn: Connection, batch: Sequence) -> BatchWritten[list[NewJob]]:
        return enqueue_one_more(conn, recovery, batch, now, dispatcher.statement_channel)

    def complete(results: list[list[NewJob]], batches) -> RedriveReport:
        new_job_of = {job.target_id: job.job_id for created in results for job in created}
        report.redriven = [
            _pair(recovery, row, new_job_of[int(row.target)])
            for row in rows
            if int(row.target) in new_job_of
        ]
        report.skipped_by_race_ids = [
            int(row.target)
            for row in rows[: attempted(rows, batches, policy)]
            if int(row.target) not in new_job_of
        ]
        report.announce_failures = batches.announce_failures
        return report

    # a batch that fails after others committed: the error carries their report (partial_report)
    policy = RecoveryPolicy(batch_size=batch_size, limits=limits)
    return write_recovery(engine, dispatcher, Writes(rows, write_batch, complete), policy)
