"""The write side of every target recovery: enqueue its job for the detected targets, oldest
first, in bounded batches (recover_targets), and read back from SAN's rows what a run wrote
(enqueued_at, report_of_writes_at), with how long each healed target had waited.

It knows a recovery only by the few fields of `Target` (targets.py's TargetRecovery is one), so
the declaration can call it without either importing the other both ways.
"""

import logging
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import pandas as pd
from sqlalchemy import func, select
from sqlalchemy.engine import Connection, Engine

from batch_pipeline.recovery.plan import (
    RecoveryPolicy,
    RecoveryReport,
    Writes,
    attempted,
    heal_ages,
    plan_recovery,
    planned_report,
    recognises_its_writes,
    write_recovery,
)
from batch_pipeline.san.database import read_transaction
from batch_pipeline.san.dialects import dialect, named_rows
from batch_pipeline.san.dispatch import Dispatcher, NewJob
from batch_pipeline.san.enqueue import BatchWritten, enqueue
from batch_pipeline.san.frames import FRAME_MIN, UTC_DATETIME
from batch_pipeline.san.job_source import JobSource
from batch_pipeline.san.limits import WriteLimits
from batch_pipeline.san.tables import FAILED, jobs

LOG = logging.getLogger(__name__)


class Target(Protocol):
    """What the write side reads of a target recovery's declaration."""

    area: str
    name: str
    job_type: str
    id_key: str
    grace_column: str

    def job_source(self, target_ids: Sequence[int]) -> JobSource: ...


# Targets per lookup statement: a default cap's 5,000 in one took 300 ms under saturation at
# scale 1, past the 250 ms a statement of ours may take (docs/benchmarks.md, "The feedback
# throttle").
FAILURE_LOOKUP_IDS = 1_000


def last_failures(
    engine: Engine,
    recovery: Target,
    targets: pd.DataFrame,
    limits: WriteLimits = WriteLimits(),
) -> pd.Series:
    """When each of `targets` (rows of this recovery's frame) that has had attempts last failed,
    indexed by target id: the audit's heal ages run from there. One lookup over FAILED jobs: the
    partial ix_san_jobs_failed_updated holds every column it needs, where ix_san_jobs_target
    would fetch each of the targets' jobs from the heap for its updated_at (docs/benchmarks.md,
    "Figures behind the code"), FAILURE_LOOKUP_IDS targets a statement. It reads only FAILED
    jobs, which an area's own write batches never create (they insert PENDING jobs):
    recover_targets runs it beside them."""
    with_attempts = targets.loc[targets["attempts"] > 0, recovery.id_key].tolist()
    if not with_attempts:
        return NO_FAILURES
    rows: list = []
    with read_transaction(engine, limits) as conn:
        for start in range(0, len(with_attempts), FAILURE_LOOKUP_IDS):
            chunk = with_attempts[start : start + FAILURE_LOOKUP_IDS]
            rows += named_rows(
                conn.execute(
                    select(jobs.c.target_id, func.max(jobs.c.updated_at).label("failed_at"))
                    .where(
                        jobs.c.status == FAILED,
                        jobs.c.job_type == recovery.job_type,
                        dialect(conn).id_in(jobs.c.target_id, chunk),
                    )
                    .group_by(jobs.c.target_id)
                ),
                ("target_id", "failed_at"),
            )
    if not rows:
        return NO_FAILURES
    target_ids, ended = zip(*rows, strict=True)
    return pd.Series(pd.to_datetime(list(ended), utc=True, errors="coerce"), index=list(target_ids))


NO_FAILURES = pd.Series([], dtype=UTC_DATETIME)


def enqueued_at_query(
    conn: Connection,
    recovery: Target,
    instant: datetime,
    target_ids: Sequence[int] | None = None,
):
    """The jobs of `recovery.job_type` this recovery created at `instant` (a run's write
    instant: only that run stamps it), for `target_ids` through ix_san_jobs_target, or all of
    them (a read of the jobs table: once per dead run, see recovery/dead_runs.py)."""
    return (
        select(jobs.c.target_id, jobs.c.id)
        .where(
            jobs.c.job_type == recovery.job_type,
            *(
                [dialect(conn).id_in(jobs.c.target_id, target_ids)]
                if target_ids is not None
                else []
            ),
            jobs.c.created_at == instant,
            jobs.c.retry_of_job_id.is_(None),
        )
        .order_by(jobs.c.id)
    )


def enqueued_at(
    engine: Engine,
    recovery: Target,
    instant: datetime,
    limits: WriteLimits,
    target_ids: Sequence[int] | None = None,
) -> dict[int, int]:
    """`enqueued_at_query`'s rows: target id -> the job created for it."""
    with read_transaction(engine, limits) as conn:
        rows = named_rows(
            conn.execute(enqueued_at_query(conn, recovery, instant, target_ids)),
            ("target_id", "id"),
        )
    return dict(rows)


def waited_since(healed: pd.DataFrame, key: str, last_failure: pd.Series) -> pd.Series:
    """Each healed target's last failure, else its `waiting_since` (saved at)."""
    return (
        healed[key]
        .map(last_failure)
        .fillna(healed["waiting_since"])
        .clip(lower=pd.Timestamp(FRAME_MIN))
    )


def audit_lookup(lookup: Future, area: str) -> pd.Series:
    """The lookup's result; if it failed, no last failures (the ages run from the saves): the
    writes have committed, and a figure of the audit is no reason to fail, and retry, them."""
    try:
        return lookup.result()
    except Exception:
        LOG.warning(
            "%s: could not read the healed targets' last failures; heal ages run from their saves",
            area,
            exc_info=True,
        )
        return NO_FAILURES


def recovered_entries(key: str, created: Sequence[NewJob]) -> list[dict]:
    """The audit's `recovered` list: each target with the job it got."""
    return [{key: job.target_id, "new_job_id": job.job_id} for job in created]


def report_of_writes_at(
    recovery: Target, engine: Engine, instant: datetime, limits: WriteLimits
) -> RecoveryReport:
    """What `recovery` wrote at `instant` (a run's write instant), read back from SAN's rows
    alone: the audit of a run that died before it could record its own."""
    created = [
        NewJob(job, recovery.job_type, target)
        for target, job in enqueued_at(engine, recovery, instant, limits).items()
    ]
    report = RecoveryReport(area=recovery.area, dry_run=False, thresholds={})
    report.recovered = recovered_entries(recovery.id_key, created)
    report.changed_ids = [job.target_id for job in created]
    report.detected = report.enqueued = report.changed = len(created)
    return report


def recover_targets(
    engine: Engine,
    dispatcher: Dispatcher,
    recovery: Target,
    candidates: pd.DataFrame,
    *,
    now: datetime,
    thresholds: dict,
    policy: RecoveryPolicy = RecoveryPolicy(),
) -> RecoveryReport:
    """Enqueue `recovery.job_type` for the detected targets, oldest first, in bounded batches."""
    key = recovery.id_key
    plan = plan_recovery(candidates, oldest_first_by=[recovery.grace_column, key], policy=policy)
    report = planned_report(recovery.area, candidates, plan, key, thresholds, policy)
    if policy.dry_run:
        return report
    run = TargetWrites(engine, recovery, candidates, plan.to_enqueue[key].tolist(), now, policy)

    def write_batch(conn: Connection, ids: Sequence[int]) -> BatchWritten:
        outcome = enqueue(
            conn,
            recovery.job_source(ids),
            now=now,
            max_attempts=policy.max_attempts,
            notify_channel=dispatcher.statement_channel,
        )
        return outcome.as_batch(outcome)

    # The heal ages' lookup on a second connection while the batches write (see last_failures).
    with ThreadPoolExecutor(
        max_workers=1, thread_name_prefix=f"{recovery.name}_heal_ages"
    ) as lookup:
        failures = lookup.submit(last_failures, engine, recovery, plan.to_enqueue, policy.limits)
        writes = Writes(
            run.to_enqueue,
            write_batch,
            complete=lambda results, batches: run.complete(
                report, results, batches, audit_lookup(failures, recovery.area), True
            ),
            # a batch failed: the database may be gone, the ages run from the saves
            complete_partial=lambda results, batches: run.complete(report, results, batches),
        )
        return write_recovery(engine, dispatcher, writes, policy)


@dataclass(frozen=True)
class TargetWrites:
    """One run's target writes: what it detected, what it set out to enqueue, when, how."""

    engine: Engine
    recovery: Target
    candidates: pd.DataFrame
    to_enqueue: list[int]
    now: datetime
    policy: RecoveryPolicy

    def complete(
        self,
        report: RecoveryReport,
        results,
        batches,
        last_failure: pd.Series = NO_FAILURES,
        recognise_earlier: bool = False,
    ) -> RecoveryReport:
        """`report` filled from what the committed batches did (and, recognised in SAN's rows
        by the run's write instant, what an earlier attempt of the step did)."""
        key, now = self.recovery.id_key, self.now
        created = [job for outcome in results for job in outcome.created]
        # Reached the cap between detection and write (another run enqueued and it failed since).
        late_exhausted = [target for outcome in results for _job_type, target in outcome.exhausted]
        report.exhausted += len(late_exhausted)
        report.exhausted_ids += late_exhausted
        settled = {*(job.target_id for job in created), *late_exhausted}
        tried = self.to_enqueue[: attempted(self.to_enqueue, batches, self.policy)]
        changed = [target for target in tried if target not in settled]
        # Changed, or given its job by an earlier attempt of this run: its rows say which.
        earlier = (
            enqueued_at(self.engine, self.recovery, now, self.policy.limits, changed)
            if recognise_earlier and changed and recognises_its_writes(self.candidates, now)
            else {}
        )
        created += [NewJob(job, self.recovery.job_type, target) for target, job in earlier.items()]
        report.written_earlier = len(earlier)
        report.enqueued = report.changed = len(created)
        report.changed_ids = [job.target_id for job in created]
        report.skipped_by_race_ids = [target for target in changed if target not in earlier]
        report.skipped_by_race = len(report.skipped_by_race_ids)
        report.recovered = recovered_entries(key, created)
        healed = self.candidates[self.candidates[key].isin([job.target_id for job in created])]
        report.heal_ages_seconds = heal_ages(waited_since(healed, key, last_failure), now)
        report.batches = batches.batches
        report.throttle = batches.throttle.metadata()
        report.announce_failures = batches.announce_failures
        return report
