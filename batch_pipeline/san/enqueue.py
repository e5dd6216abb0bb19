"""The one enqueue path every service uses: `enqueue(jobType, targetId)`, set-based.

`enqueue` takes a batch's `JobSource` (targets by id, or the rows a data-modifying statement of
the same transaction returns: the ghosts it closes, the summaries it creates) and inserts one
PENDING job per (job_type, target_id) that has no active job and is under the poison cap. It
runs inside a `write_transaction` (which serialises batch_pipeline's writers), so its "no active
job yet" check and its insert cannot interleave with another run's.

On PostgreSQL with ix_san_jobs_target the whole batch is one fused statement
(dialects/postgresql.py); elsewhere the portable form below runs the source, then one count
query and one insert per job type. Both give the same `EnqueueOutcome`.

`run_in_batches` splits work into bounded batches, each its own transaction, and announces the
new jobs through the dispatcher: in the transaction (pg_notify) or after commit (Redis).
"""

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Generic, NamedTuple, TypeVar

from sqlalchemy import case, func, select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from batch_pipeline.san.database import write_transaction
from batch_pipeline.san.dialects import dialect, named_rows
from batch_pipeline.san.dispatch import Dispatcher, NewJob
from batch_pipeline.san.errors import first_line
from batch_pipeline.san.job_source import Eligibility, EnqueueRequest, JobSource
from batch_pipeline.san.limits import WriteLimits
from batch_pipeline.san.progress import Progress
from batch_pipeline.san.sampler import Sampler
from batch_pipeline.san.tables import PENDING, holds_its_target, jobs
from batch_pipeline.san.throttle import (
    WRITE_AIMS,
    Overrides,
    Signals,
    Throttle,
    ThrottleLog,
    ThrottleState,
)

log = logging.getLogger(__name__)


@dataclass
class EnqueueOutcome:
    created: list[NewJob] = field(default_factory=list)
    # (job_type, target_id) at the poison cap
    exhausted: list[tuple[str, int]] = field(default_factory=list)
    # (job_type, target_id) someone else covers
    already_active: list[tuple[str, int]] = field(default_factory=list)
    announced: bool = False  # the write statement sent the created jobs' pg_notify itself
    # what a statement source returned, by name
    source_rows: list[dict] = field(default_factory=list)

    def as_batch(self, result) -> "BatchWritten":
        """This outcome as one batch of `run_in_batches`, with the caller's `result`."""
        return BatchWritten(result, self.created, self.announced)


def enqueue(
    conn: Connection,
    source: JobSource,
    *,
    now: datetime,
    max_attempts: int,
    notify_channel: str | None = None,
) -> EnqueueOutcome:
    """Insert one PENDING job per distinct (job_type, target_id) of `source` that has no active
    job and is under the cap (`max_attempts` 0: unlimited). Must run inside `write_transaction`.

    With `notify_channel` (the dispatcher's `statement_channel`) the fused statement announces
    the new jobs itself and says so in `announced`."""
    if not source.from_rows and not source.requests:
        return EnqueueOutcome()
    fused_enqueue = dialect(conn).fused_enqueue(conn, source)
    if fused_enqueue is not None:
        fused = fused_enqueue(
            conn, source, now=now, max_attempts=max_attempts, notify_channel=notify_channel
        )
        return EnqueueOutcome(
            created=list(map(NewJob._make, fused["created"])),
            exhausted=fused["exhausted"],
            already_active=fused["already_active"],
            announced=fused["announced"],
            source_rows=fused["source_rows"],
        )
    return _enqueue_portably(conn, source, now, max_attempts)


def enqueue_jobs(
    conn: Connection,
    job_type: str,
    requests: Sequence[EnqueueRequest],
    *,
    now: datetime,
    max_attempts: int,
    eligibility: Eligibility | None = None,
    notify_channel: str | None = None,
) -> EnqueueOutcome:
    """`enqueue` for targets of one job type; `exhausted` and `already_active` as target ids."""
    outcome = enqueue(
        conn,
        JobSource(job_type=job_type, requests=requests, eligibility=eligibility),
        now=now,
        max_attempts=max_attempts,
        notify_channel=notify_channel,
    )
    outcome.exhausted = [target for _type, target in outcome.exhausted]
    outcome.already_active = [target for _type, target in outcome.already_active]
    return outcome


# -- the portable form (SQLite; PostgreSQL without ix_san_jobs_target) -------------------------
def attempts_and_active(conn: Connection, job_type: str, target_ids: Sequence[int]):
    """Attempts so far and active jobs now, per target: one index-only lookup per target with
    the recommended ix_san_jobs_target index."""
    return (
        select(
            jobs.c.target_id,
            func.count().label("attempts"),
            func.sum(case((holds_its_target(jobs.c.status), 1), else_=0)).label("active"),
        )
        .where(jobs.c.job_type == job_type, dialect(conn).id_in(jobs.c.target_id, target_ids))
        .group_by(jobs.c.target_id)
    )


def _write_source_rows(conn: Connection, source: JobSource) -> list[dict]:
    """The portable form of a rows source: run it, its rows by name."""
    if source.inserts is not None:
        table, values = source.inserts
        return dialect(conn).insert_rows(conn, table, **values)
    return [dict(row) for row in conn.execute(source.statement).mappings()]


def _requests_by_type(
    conn: Connection, source: JobSource
) -> tuple[dict[str, dict[int, EnqueueRequest]], list[dict]]:
    """The source's requests per job type, one per target (retrying the oldest row for it),
    and the statement's rows."""
    if not source.from_rows:
        unique: dict[int, EnqueueRequest] = {}
        for request in source.requests:
            unique.setdefault(int(request.target_id), request)
        return {source.job_type: unique}, []
    rows = _write_source_rows(conn, source)
    by_type: dict[str, dict[int, EnqueueRequest]] = {}
    for row in rows:
        target = int(row[source.target_column])
        retry_of = row[source.retry_of_column] if source.retry_of_column else None
        of_type = by_type.setdefault(source.job_type or row["job_type"], {})
        earlier = of_type.get(target)
        if earlier is None or (retry_of is not None and retry_of < earlier.retry_of_job_id):
            of_type[target] = EnqueueRequest(target, retry_of)
    rows.sort(key=lambda row: row[source.returned[0]])
    return by_type, [{name: row[name] for name in source.returned} for row in rows]


def _enqueue_portably(
    conn: Connection, source: JobSource, now: datetime, max_attempts: int
) -> EnqueueOutcome:
    by_type, source_rows = _requests_by_type(conn, source)
    outcome = EnqueueOutcome(source_rows=source_rows)
    for job_type in sorted(by_type):
        unique = by_type[job_type]
        if source.eligibility is not None and unique:
            table = source.eligibility.table
            still = set(
                conn.execute(
                    select(table.c.id).where(
                        dialect(conn).id_in(table.c.id, list(unique)), source.eligibility.predicate
                    )
                ).scalars()
            )
            unique = {target: request for target, request in unique.items() if target in still}
        counts = (
            {}
            if source.creates_targets or not unique
            else {
                # one fetch for the whole batch, the driver's own rows where it can (plain_rows)
                target_id: (attempts, active)
                for target_id, attempts, active in named_rows(
                    conn.execute(attempts_and_active(conn, job_type, list(unique))),
                    ("target_id", "attempts", "active"),
                )
            }
        )
        to_create: list[EnqueueRequest] = []
        for target_id, request in sorted(unique.items()):
            attempts, active = counts.get(target_id, (0, 0))
            if active:
                outcome.already_active.append((job_type, target_id))
            elif max_attempts and attempts >= max_attempts:
                outcome.exhausted.append((job_type, target_id))
            else:
                to_create.append(request)
        outcome.created += _insert_jobs(conn, job_type, to_create, now)
    return outcome


def _insert_jobs(
    conn: Connection, job_type: str, to_create: Sequence[EnqueueRequest], now: datetime
) -> list[NewJob]:
    created = dialect(conn).insert_rows(
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
        NewJob(row["id"], job_type, row["target_id"], row["retry_of_job_id"]) for row in created
    ]


# -- batches -----------------------------------------------------------------------------------
T = TypeVar("T")
R = TypeVar("R")


@dataclass
class BatchRunReport:
    batches: int = 0
    rows: int = 0  # items the committed batches took
    announce_failures: int = 0
    throttle: ThrottleLog = field(default_factory=ThrottleLog)


class BatchWritten(NamedTuple, Generic[R]):
    """What one write batch did: its own result, the jobs it created, and whether its
    statement already announced them on the dispatcher's `statement_channel`."""

    result: R
    created: list[NewJob]
    announced: bool = False


def signals_of(engine: Engine) -> Callable[[], Signals | None]:
    """The database's signals for the throttle; a reading that fails is no reading (the batch
    after it rests by the batch-time rule), never a failed run."""
    read = dialect(engine).read_load

    def reading() -> Signals | None:
        try:
            return read(engine)
        except SQLAlchemyError as error:
            log.warning("throttle: cannot read the database's load: %s", first_line(error))
            return None

    return reading


def throttle_for(
    engine: Engine,
    batch_size: int | None,
    limits: WriteLimits,
    aims: ThrottleState = WRITE_AIMS,
    progress: Progress | None = None,
) -> Throttle:
    """The run's throttle: readings sampled beside its writes where the database has signals
    (PostgreSQL), else the batch-time rule (SQLite); `progress` told after each batch."""
    reading = signals_of(engine)
    has_signals = reading() is not None
    return Throttle(
        reading if has_signals else None,
        Overrides(batch_size, limits.batch_pause_ratio),
        sleep=time.sleep,
        sampler=Sampler(reading) if has_signals else None,
        aims=aims,
        after_batch=progress.after_batch if progress is not None else None,
    )


def run_in_batches(
    engine: Engine,
    dispatcher: Dispatcher,
    items: Sequence[T],
    batch_size: int | None,
    write_batch: Callable[[Connection, Sequence[T]], BatchWritten[R]],
    limits: WriteLimits = WriteLimits(),
) -> tuple[list[R], BatchRunReport]:
    """Apply `write_batch` to bounded slices of `items`, one transaction per slice.

    How many items a slice takes and how long to rest before it is the throttle's
    (san/throttle.py), steered by the database's signals; `batch_size` and
    `limits.batch_pause_ratio` are an operator's fixed values (None: the throttle's).

    The jobs a batch created are announced in the same transaction (pg_notify: by the write
    statement itself, else by a second statement) or right after it commits (Redis). A failure
    rolls back only the current batch: earlier batches stay committed and whole.
    """
    results: list[R] = []
    report = BatchRunReport()
    throttle = throttle_for(
        engine, batch_size, limits, progress=Progress("writes", "rows", len(items))
    )
    report.throttle = throttle.log
    try:
        while report.rows < len(items):
            batch = items[report.rows : report.rows + throttle.next_batch()]
            started = time.monotonic()
            with write_transaction(engine, limits) as conn:
                written = write_batch(conn, batch)
                dispatcher.announce_in_transaction(
                    conn, [] if written.announced else written.created
                )
            throttle.written(len(batch), time.monotonic() - started)
            report.batches += 1
            report.rows += len(batch)
            report.announce_failures += dispatcher.announce_after_commit(written.created)
            results.append(written.result)
    except Exception as error:
        if results:  # the error travels on unchanged, with what the committed batches did
            setattr(error, COMMITTED_ATTRIBUTE, Committed(results, report))
        raise
    finally:
        throttle.close()
    return results, report


# The attribute of an error raised by run_in_batches after some batches had committed.
COMMITTED_ATTRIBUTE = "batch_pipeline_committed"


class Committed(NamedTuple):
    results: list
    batches: "BatchRunReport"


def committed_before(error: BaseException) -> Committed | None:
    """What the batches that committed before `error` did (run_in_batches), or None."""
    return getattr(error, COMMITTED_ATTRIBUTE, None)
