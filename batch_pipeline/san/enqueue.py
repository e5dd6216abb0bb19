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
from typing import Generic, NamedTuple, TypeVar

from sqlalchemy import Table, and_, bindparam, case, false, func, insert, literal, null, select, text, true
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql.elements import ColumnElement

from batch_pipeline.san.database import WriteLimits, write_transaction
from batch_pipeline.san.dispatch import Dispatcher, NewJob, notify_jobs
from batch_pipeline.san.schema import ACTIVE_STATUSES, PENDING, jobs
from batch_pipeline.san.sql import BigIntArray, array_of, id_in, insert_rows


@dataclass(frozen=True)
class EnqueueRequest:
    target_id: int
    retry_of_job_id: int | None = None


@dataclass
class EnqueueOutcome:
    created: list[NewJob] = field(default_factory=list)
    exhausted: list[int] = field(default_factory=list)  # target ids at the poison cap
    already_active: list[int] = field(default_factory=list)  # target ids someone else covers
    announced: bool = False  # the write statement sent the created jobs' pg_notify itself


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
    notify_channel: str | None = None,
) -> EnqueueOutcome:
    """Insert one PENDING job per distinct target that has no active job and is under the cap.

    Must run inside `write_transaction`. `max_attempts` 0 means unlimited. Targets this very
    transaction created (a new daily summary) cannot have jobs yet, so their lookup is skipped.
    With `eligibility`, targets that no longer need the job are dropped (not in the outcome).
    With `notify_channel` (the dispatcher's `statement_channel`), the one-statement path
    announces the new jobs itself and says so in `announced`.
    """
    unique: dict[int, EnqueueRequest] = {}
    for request in requests:
        unique.setdefault(int(request.target_id), request)
    if not unique:
        return EnqueueOutcome()
    if targets_created_in_this_transaction:
        return EnqueueOutcome(created=_insert_jobs(conn, job_type, list(unique.values()), now))
    if conn.dialect.name == "postgresql" and has_target_index(conn):
        return _enqueue_in_one_statement(
            conn, job_type, list(unique.values()), now, max_attempts, eligibility, notify_channel
        )

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


def enqueue_batch(
    conn: Connection, job_type: str, requests: Sequence[EnqueueRequest], *, now: datetime, max_attempts: int,
    eligibility: Eligibility | None = None, notify_channel: str | None = None,
) -> "BatchWritten[EnqueueOutcome]":
    """`enqueue_jobs` as one batch of `run_in_batches`."""
    outcome = enqueue_jobs(conn, job_type, requests, now=now, max_attempts=max_attempts, eligibility=eligibility,
                           notify_channel=notify_channel)
    return BatchWritten(outcome, outcome.created, outcome.announced)


def has_target_index(conn: Connection) -> bool:
    """Whether ix_san_jobs_target exists (cached per database connection).

    The one-statement path probes it per target. Without it, that statement would scan the
    whole jobs table once per batch, and a data-modifying statement gets no parallel workers;
    the separate count query below does, so it is the faster path on a database without it."""
    if "batch_pipeline.has_target_index" not in conn.info:
        conn.info["batch_pipeline.has_target_index"] = conn.execute(
            text("SELECT to_regclass('ix_san_jobs_target') IS NOT NULL")
        ).scalar_one()
    return conn.info["batch_pipeline.has_target_index"]


def jobs_for_new_targets(job_type: str, new_targets, now: datetime):
    """PostgreSQL: a CTE inserting one PENDING job per row of `new_targets` (an INSERT …
    RETURNING id CTE of the same statement). Targets this very statement creates have no jobs
    yet: nothing to re-check, and the target and its job commit or roll back together."""
    return (
        insert(jobs)
        .from_select(
            ["job_type", "target_id", "status", "created_at", "updated_at"],
            select(
                literal(job_type, jobs.c.job_type.type), new_targets.c.id, literal(PENDING, jobs.c.status.type),
                literal(now, jobs.c.created_at.type), literal(now, jobs.c.updated_at.type),
            ).order_by(new_targets.c.id),
        )
        .returning(jobs.c.id, jobs.c.job_type, jobs.c.target_id)
        .cte("new_jobs")
    )


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


def requested_from_batch(job_type: str, requests: Sequence[EnqueueRequest], eligibility: Eligibility | None):
    """A batch of requests as the `requested` CTE of `enqueue_statement`: two array parameters,
    and, with `eligibility`, the write-time re-check of each target. Sorted by target, so the
    per-target probes walk the indexes in order."""
    requests = sorted(requests, key=lambda request: request.target_id)
    batch = func.unnest(
        bindparam("target_ids", [r.target_id for r in requests], type_=BigIntArray),
        bindparam("retry_of_ids", [r.retry_of_job_id for r in requests], type_=BigIntArray),
    ).table_valued("target_id", "retry_of").render_derived(name="batch")
    requested = select(literal(job_type, jobs.c.job_type.type).label("job_type"), batch.c.target_id, batch.c.retry_of)
    if eligibility is not None:
        # A LATERAL ... LIMIT 1 probe per target, by primary key: a plain join lets the planner
        # hash every row matching the predicate (all 40,000 unrefined scraps, through their
        # partial index) for each 5,000-id batch, which grows with the table, not the batch.
        still_eligible = (
            select(literal(1).label("eligible"))
            .select_from(eligibility.table)
            .where(eligibility.table.c.id == batch.c.target_id, eligibility.predicate)
            .limit(1)
            .lateral("still_eligible")
        )
        requested = requested.join_from(batch, still_eligible, true())
    return requested.cte("requested")


def enqueue_statement(requested, now: datetime, max_attempts: int, notify_channel: str | None = None):
    """PostgreSQL with ix_san_jobs_target: the attempt count, the active-job check and the
    insert for one batch in a single statement: one round trip, one index-only range per target
    for both counts.

    `requested` is a CTE of (job_type, target_id, retry_of), one row per (job_type, target_id),
    and optionally `closing`: how many of the target's jobs an earlier CTE of the same
    statement closes (ghost recovery). Every CTE reads the snapshot from before the statement,
    in which those jobs are still active, so they are subtracted from its active jobs.

    The outcome comes back as arrays in one row, which the driver decodes far faster than
    thousands of rows: the created jobs' ids, job types, targets and retry_of ids (in id
    order), then (job_type, target_id) pairs already active, then pairs at the poison cap,
    then how many jobs the statement announced itself on `notify_channel` (NULL without one).
    """
    closing = requested.c.closing if "closing" in requested.c else literal(0)
    counted = (
        select(
            requested.c.job_type,
            requested.c.target_id,
            requested.c.retry_of,
            func.count(jobs.c.target_id).label("attempts"),  # target_id, not id: an index-only probe
            (func.count(jobs.c.target_id).filter(jobs.c.status.in_(ACTIVE_STATUSES)) - closing).label("active_jobs"),
        )
        .select_from(
            requested.outerjoin(
                jobs, and_(jobs.c.target_id == requested.c.target_id, jobs.c.job_type == requested.c.job_type)
            )
        )
        .group_by(requested.c.job_type, requested.c.target_id, requested.c.retry_of, closing)
        .cte("counted")
    )
    active = counted.c.active_jobs > 0
    exhausted = and_(~active, counted.c.attempts >= max_attempts) if max_attempts else false()
    inserted = (
        insert(jobs)
        .from_select(
            ["job_type", "target_id", "status", "created_at", "updated_at", "retry_of_job_id"],
            select(
                counted.c.job_type, counted.c.target_id, literal(PENDING, jobs.c.status.type),
                literal(now, jobs.c.created_at.type), literal(now, jobs.c.updated_at.type), counted.c.retry_of,
            ).where(~active, ~exhausted).order_by(counted.c.job_type, counted.c.target_id),
        )
        .returning(jobs.c.id, jobs.c.job_type, jobs.c.target_id, jobs.c.retry_of_job_id)
        .cte("inserted")
    )

    def counted_where(column, condition):
        return array_of(column).where(condition)

    return select(
        *(array_of(column, inserted.c.id) for column in (inserted.c.id, inserted.c.job_type, inserted.c.target_id,
                                                          inserted.c.retry_of_job_id)),
        counted_where(counted.c.job_type, active), counted_where(counted.c.target_id, active),
        counted_where(counted.c.job_type, exhausted), counted_where(counted.c.target_id, exhausted),
        notify_jobs(notify_channel, inserted) if notify_channel else null(),
    )


OUTCOME_COLUMNS = 9  # the columns enqueue_statement returns, before any a caller adds


@dataclass
class StatementOutcome:
    """`enqueue_statement`'s arrays, decoded."""

    created: list[NewJob]
    already_active: list[tuple[str, int]]  # (job_type, target_id)
    exhausted: list[tuple[str, int]]
    announced: bool  # the statement sent the created jobs' pg_notify itself

    @classmethod
    def from_row(cls, row: Sequence) -> "StatementOutcome":
        *arrays, announced = row[:OUTCOME_COLUMNS]
        ids, types, targets, retry_ofs, active_types, active_targets, exhausted_types, exhausted_targets = (
            values or [] for values in arrays
        )
        return cls(
            created=[NewJob(*job) for job in zip(ids, types, targets, retry_ofs)],
            already_active=list(zip(active_types, active_targets)),
            exhausted=list(zip(exhausted_types, exhausted_targets)),
            announced=announced is not None,
        )


def batch_enqueue_statement(
    job_type: str, requests: Sequence[EnqueueRequest], now: datetime, max_attempts: int,
    eligibility: Eligibility | None, notify_channel: str | None = None,
):
    """The one statement that enqueues a batch of requests (PostgreSQL with ix_san_jobs_target)."""
    return enqueue_statement(requested_from_batch(job_type, requests, eligibility), now, max_attempts, notify_channel)


def _enqueue_in_one_statement(
    conn: Connection, job_type: str, requests: Sequence[EnqueueRequest], now: datetime, max_attempts: int,
    eligibility: Eligibility | None, notify_channel: str | None,
) -> EnqueueOutcome:
    outcome = StatementOutcome.from_row(
        conn.execute(batch_enqueue_statement(job_type, requests, now, max_attempts, eligibility, notify_channel)).one()
    )
    return EnqueueOutcome(
        created=outcome.created,
        exhausted=[target for _type, target in outcome.exhausted],
        already_active=[target for _type, target in outcome.already_active],
        announced=outcome.announced,
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


class BatchWritten(NamedTuple, Generic[R]):
    """What one write batch did: its own result, the jobs it created, and whether its
    statement already announced them on the dispatcher's `statement_channel`."""

    result: R
    created: list[NewJob]
    announced: bool = False


def run_in_batches(
    engine: Engine,
    dispatcher: Dispatcher,
    items: Sequence[T],
    batch_size: int,
    write_batch: Callable[[Connection, Sequence[T]], BatchWritten[R]],
    limits: WriteLimits = WriteLimits(),
) -> tuple[list[R], BatchRunReport]:
    """Apply `write_batch` to bounded slices of `items`, one transaction per slice.

    The jobs a batch created are announced in the same transaction (pg_notify: by the write
    statement itself, else by a second statement) or right after it commits (Redis). A failure
    rolls back only the current batch: earlier batches stay committed and whole.
    """
    results: list[R] = []
    report = BatchRunReport()
    for batch in chunked(items, batch_size):
        with write_transaction(engine, limits) as conn:
            written = write_batch(conn, batch)
            dispatcher.announce_in_transaction(conn, [] if written.announced else written.created)
        report.batches += 1
        report.announce_failures += dispatcher.announce_after_commit(written.created)
        results.append(written.result)
    return results, report
