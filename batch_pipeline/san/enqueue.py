"""The one enqueue path every service uses: `enqueue(jobType, targetId)`, set-based.

`enqueue_jobs` runs inside a `write_transaction` (which serialises batch_pipeline's writers), so
its "no active job yet" check and its insert cannot interleave with another run's. It never
creates a second active job for a (job_type, target_id), and never a job for a target that
already has `max_attempts` jobs (the poison cap).

`run_in_batches` splits work into bounded batches, each its own transaction, and announces the
new jobs through the dispatcher: in the transaction (pg_notify) or after commit (Redis).
"""

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

from sqlalchemy import case, func, select
from sqlalchemy.engine import Connection, Engine

from batch_pipeline.san.database import WriteLimits, write_transaction
from batch_pipeline.san.dispatch import Dispatcher, NewJob
from batch_pipeline.san.schema import ACTIVE_STATUSES, PENDING, jobs
from batch_pipeline.san.sql import id_in, insert_rows


@dataclass(frozen=True)
class EnqueueRequest:
    target_id: int
    retry_of_job_id: int | None = None


@dataclass
class EnqueueOutcome:
    created: list[NewJob] = field(default_factory=list)
    exhausted: list[int] = field(default_factory=list)  # target ids at the poison cap
    already_active: list[int] = field(default_factory=list)  # target ids someone else covers

    def extend(self, other: "EnqueueOutcome") -> None:
        self.created += other.created
        self.exhausted += other.exhausted
        self.already_active += other.already_active


def attempts_and_active(conn: Connection, job_type: str, target_ids: Sequence[int]):
    """Attempts so far and active jobs now, per target: one index-only lookup per target with
    the recommended ix_san_jobs_target index."""
    return (
        select(
            jobs.c.target_id,
            func.count().label("attempts"),
            func.sum(case((jobs.c.status.in_(ACTIVE_STATUSES), 1), else_=0)).label("active"),
        )
        .where(jobs.c.job_type == job_type, id_in(conn, jobs.c.target_id, target_ids))
        .group_by(jobs.c.target_id)
    )


def enqueue_jobs(
    conn: Connection,
    job_type: str,
    requests: Sequence[EnqueueRequest],
    *,
    now: datetime,
    max_attempts: int,
    targets_created_in_this_transaction: bool = False,
) -> EnqueueOutcome:
    """Insert one PENDING job per distinct target that has no active job and is under the cap.

    Must run inside `write_transaction`. `max_attempts` 0 means unlimited. Targets this very
    transaction created (a new daily summary) cannot have jobs yet, so their lookup is skipped.
    """
    outcome = EnqueueOutcome()
    unique: dict[int, EnqueueRequest] = {}
    for request in requests:
        unique.setdefault(int(request.target_id), request)
    if not unique:
        return outcome

    # .tuples().all(): one fetch for the whole batch, no per-row Row objects
    counts = {} if targets_created_in_this_transaction else {
        target_id: (attempts, active)
        for target_id, attempts, active in conn.execute(attempts_and_active(conn, job_type, list(unique))).tuples().all()
    }
    to_create: list[EnqueueRequest] = []
    for target_id, request in unique.items():
        attempts, active = counts.get(target_id, (0, 0))
        if active:
            outcome.already_active.append(target_id)
        elif max_attempts and attempts >= max_attempts:
            outcome.exhausted.append(target_id)
        else:
            to_create.append(request)
    created = insert_rows(
        conn,
        jobs,
        constants={"job_type": job_type, "status": PENDING, "created_at": now, "updated_at": now},
        id_columns={
            "target_id": [r.target_id for r in to_create],
            "retry_of_job_id": [r.retry_of_job_id for r in to_create],
        },
        returning=["id", "target_id", "retry_of_job_id"],
    )
    outcome.created = [
        NewJob(job_id=job_id, job_type=job_type, target_id=target_id, retry_of_job_id=retry_of)
        for job_id, target_id, retry_of in created
    ]
    return outcome


T = TypeVar("T")
R = TypeVar("R")


def chunked(items: Sequence[T], size: int) -> Iterable[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


@dataclass
class BatchRunReport:
    batches: int = 0
    announce_failures: int = 0


def run_in_batches(
    engine: Engine,
    dispatcher: Dispatcher,
    items: Sequence[T],
    batch_size: int,
    write_batch: Callable[[Connection, Sequence[T]], tuple[R, list[NewJob]]],
    limits: WriteLimits = WriteLimits(),
) -> tuple[list[R], BatchRunReport]:
    """Apply `write_batch` to bounded slices of `items`, one transaction per slice.

    `write_batch` returns its own result and the jobs it created; those are announced in the
    same transaction (pg_notify) or right after it commits (Redis). A failure rolls back only
    the current batch: earlier batches stay committed and whole.
    """
    results: list[R] = []
    report = BatchRunReport()
    for batch in chunked(items, batch_size):
        with write_transaction(engine, limits) as conn:
            result, created = write_batch(conn, batch)
            dispatcher.announce_in_transaction(conn, created)
        report.batches += 1
        report.announce_failures += dispatcher.announce_after_commit(created)
        results.append(result)
    return results, report
