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

from sqlalchemy import Table, and_, bindparam, case, false, func, insert, literal, select, text
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql.elements import ColumnElement

from batch_pipeline.san.database import WriteLimits, write_transaction
from batch_pipeline.san.dispatch import Dispatcher, NewJob
from batch_pipeline.san.schema import ACTIVE_STATUSES, PENDING, jobs
from batch_pipeline.san.sql import BigIntArray, id_in, insert_rows


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


@dataclass(frozen=True)
class Eligibility:
    """A write-time re-check: each target must still be a row of `table` matching `predicate`
    (e.g. a scrap still without a card). Targets that no longer match get no job."""

    table: Table
    predicate: ColumnElement


def enqueue_jobs(
    conn: Connection,
    job_type: str,
    requests: Sequence[EnqueueRequest],
    *,
    now: datetime,
    max_attempts: int,
    targets_created_in_this_transaction: bool = False,
    eligibility: Eligibility | None = None,
) -> EnqueueOutcome:
    """Insert one PENDING job per distinct target that has no active job and is under the cap.

    Must run inside `write_transaction`. `max_attempts` 0 means unlimited. Targets this very
    transaction created (a new daily summary) cannot have jobs yet, so their lookup is skipped.
    With `eligibility`, targets that no longer need the job are dropped (not in the outcome).
    """
    unique: dict[int, EnqueueRequest] = {}
    for request in requests:
        unique.setdefault(int(request.target_id), request)
    if not unique:
        return EnqueueOutcome()
    if targets_created_in_this_transaction:
        return EnqueueOutcome(created=_insert_jobs(conn, job_type, list(unique.values()), now))
    if conn.dialect.name == "postgresql" and _has_target_index(conn):
        return _enqueue_in_one_statement(conn, job_type, list(unique.values()), now, max_attempts, eligibility)

    outcome = EnqueueOutcome()
    if eligibility is not None:
        still = set(conn.execute(
            select(eligibility.table.c.id).where(id_in(conn, eligibility.table.c.id, list(unique)), eligibility.predicate)
        ).scalars())
        unique = {target: request for target, request in unique.items() if target in still}
    # .tuples().all(): one fetch for the whole batch, no per-row Row objects
    counts = {
        target_id: (attempts, active)
        for target_id, attempts, active in conn.execute(attempts_and_active(conn, job_type, list(unique))).tuples().all()
    } if unique else {}
    to_create: list[EnqueueRequest] = []
    for target_id, request in unique.items():
        attempts, active = counts.get(target_id, (0, 0))
        if active:
            outcome.already_active.append(target_id)
        elif max_attempts and attempts >= max_attempts:
            outcome.exhausted.append(target_id)
        else:
            to_create.append(request)
    outcome.created = _insert_jobs(conn, job_type, to_create, now)
    return outcome


def _has_target_index(conn: Connection) -> bool:
    """Whether ix_san_jobs_target exists (cached per database connection).

    The one-statement path probes it per target. Without it, that statement would scan the
    whole jobs table once per batch, and a data-modifying statement gets no parallel workers;
    the separate count query below does, so it is the faster path on a database without it."""
    if "batch_pipeline.has_target_index" not in conn.info:
        conn.info["batch_pipeline.has_target_index"] = conn.execute(
            text("SELECT to_regclass('ix_san_jobs_target') IS NOT NULL")
        ).scalar_one()
    return conn.info["batch_pipeline.has_target_index"]


def _insert_jobs(conn: Connection, job_type: str, to_create: Sequence[EnqueueRequest], now: datetime) -> list[NewJob]:
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
    return [
        NewJob(job_id=job_id, job_type=job_type, target_id=target_id, retry_of_job_id=retry_of)
        for job_id, target_id, retry_of in created
    ]


def enqueue_statement(
    job_type: str, requests: Sequence[EnqueueRequest], now: datetime, max_attempts: int, eligibility: Eligibility | None
):
    """PostgreSQL with ix_san_jobs_target: the re-check, the attempt count, the active-job check
    and the insert of one batch in a single statement: one round trip, and one index range per
    target for both counts. The outcome comes back as five arrays in one row (created job ids,
    their targets, their retry_of ids; targets with an active job; exhausted targets), which
    the driver decodes far faster than thousands of rows."""
    batch = func.unnest(
        bindparam("target_ids", [int(r.target_id) for r in requests], type_=BigIntArray),
        bindparam("retry_of_ids", [r.retry_of_job_id for r in requests], type_=BigIntArray),
    ).table_valued("target_id", "retry_of").render_derived(name="batch")
    requested = select(batch.c.target_id, batch.c.retry_of)
    if eligibility is not None:
        requested = requested.join_from(batch, eligibility.table, eligibility.table.c.id == batch.c.target_id).where(
            eligibility.predicate
        )
    requested = requested.cte("requested")
    counted = (
        select(
            requested.c.target_id,
            requested.c.retry_of,
            func.count(jobs.c.id).label("attempts"),
            func.count(jobs.c.id).filter(jobs.c.status.in_(ACTIVE_STATUSES)).label("active_jobs"),
        )
        .select_from(
            requested.outerjoin(jobs, and_(jobs.c.target_id == requested.c.target_id, jobs.c.job_type == job_type))
        )
        .group_by(requested.c.target_id, requested.c.retry_of)
        .cte("counted")
    )
    active = counted.c.active_jobs > 0
    exhausted = and_(~active, counted.c.attempts >= max_attempts) if max_attempts else false()
    inserted = (
        insert(jobs)
        .from_select(
            ["job_type", "target_id", "status", "created_at", "updated_at", "retry_of_job_id"],
            select(
                literal(job_type, jobs.c.job_type.type), counted.c.target_id, literal(PENDING, jobs.c.status.type),
                literal(now, jobs.c.created_at.type), literal(now, jobs.c.updated_at.type), counted.c.retry_of,
            ).where(~active, ~exhausted).order_by(counted.c.target_id),
        )
        .returning(jobs.c.id, jobs.c.target_id, jobs.c.retry_of_job_id)
        .cte("inserted")
    )

    def created(column):  # one array per RETURNING column, all in job id order
        return select(func.array_agg(aggregate_order_by(column, inserted.c.id))).scalar_subquery()

    def targets_where(condition):
        return select(func.array_agg(counted.c.target_id)).where(condition).scalar_subquery()

    return select(
        created(inserted.c.id),
        created(inserted.c.target_id),
        created(inserted.c.retry_of_job_id),
        targets_where(active),
        targets_where(exhausted),
    )


def _enqueue_in_one_statement(
    conn: Connection, job_type: str, requests: Sequence[EnqueueRequest], now: datetime, max_attempts: int,
    eligibility: Eligibility | None,
) -> EnqueueOutcome:
    job_ids, target_ids, retry_of_ids, active, exhausted = conn.execute(
        enqueue_statement(job_type, requests, now, max_attempts, eligibility)
    ).one()
    return EnqueueOutcome(
        created=[
            NewJob(job_id=job_id, job_type=job_type, target_id=target_id, retry_of_job_id=retry_of)
            for job_id, target_id, retry_of in zip(job_ids or [], target_ids or [], retry_of_ids or [])
        ],
        exhausted=list(exhausted or []),
        already_active=list(active or []),
    )


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
