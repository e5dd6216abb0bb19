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

from sqlalchemy import bindparam, case, func, insert, select
from sqlalchemy.engine import Connection, Engine

from batch_pipeline.san.database import WriteLimits, write_transaction
from batch_pipeline.san.dispatch import Dispatcher, NewJob
from batch_pipeline.san.schema import ACTIVE_STATUSES, PENDING, jobs


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


# Attempts so far and active jobs now, per target: one index-only lookup per target with the
# recommended ix_san_jobs_target index.
ATTEMPTS_AND_ACTIVE = (
    select(
        jobs.c.target_id,
        func.count().label("attempts"),
        func.sum(case((jobs.c.status.in_(ACTIVE_STATUSES), 1), else_=0)).label("active"),
    )
    .where(jobs.c.job_type == bindparam("job_type"), jobs.c.target_id.in_(bindparam("target_ids", expanding=True)))
    .group_by(jobs.c.target_id)
)

INSERT_PENDING_JOBS = insert(jobs).returning(
    jobs.c.id, jobs.c.target_id, jobs.c.retry_of_job_id, sort_by_parameter_order=True
)


def enqueue_jobs(
    conn: Connection,
    job_type: str,
    requests: Sequence[EnqueueRequest],
    *,
    now: datetime,
    max_attempts: int,
) -> EnqueueOutcome:
    """Insert one PENDING job per distinct target that has no active job and is under the cap.

    Must run inside `write_transaction`. `max_attempts` 0 means unlimited.
    """
    outcome = EnqueueOutcome()
    unique: dict[int, EnqueueRequest] = {}
    for request in requests:
        unique.setdefault(int(request.target_id), request)
    if not unique:
        return outcome

    counts = {
        row.target_id: (row.attempts, row.active)
        for row in conn.execute(ATTEMPTS_AND_ACTIVE, {"job_type": job_type, "target_ids": list(unique)})
    }
    rows = []
    for target_id, request in unique.items():
        attempts, active = counts.get(target_id, (0, 0))
        if active:
            outcome.already_active.append(target_id)
        elif max_attempts and attempts >= max_attempts:
            outcome.exhausted.append(target_id)
        else:
            rows.append(
                {
                    "job_type": job_type,
                    "target_id": target_id,
                    "status": PENDING,
                    "created_at": now,
                    "updated_at": now,
                    "retry_of_job_id": request.retry_of_job_id,
                }
            )
    if rows:
        result = conn.execute(INSERT_PENDING_JOBS, rows)
        outcome.created = [
            NewJob(job_id=row.id, job_type=job_type, target_id=row.target_id, retry_of_job_id=row.retry_of_job_id)
            for row in result
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
