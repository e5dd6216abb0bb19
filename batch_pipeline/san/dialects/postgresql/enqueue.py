"""The fused enqueue statement: with ix_san_jobs_target, a batch's source (the ghosts it closes,
the summaries it creates, or a list of targets), the attempt and active counts, the insert and
the pg_notify of the new jobs in one statement, its outcome a few arrays (the algorithm's twin
of san/enqueue.py's portable form)."""

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    and_,
    bindparam,
    cast,
    false,
    func,
    literal,
    null,
    select,
    true,
)
from sqlalchemy.engine import Connection

from batch_pipeline.san.dialects.interface import FusedEnqueue
from batch_pipeline.san.dialects.postgresql.catalog import has_target_index, has_unique_job_index
from batch_pipeline.san.dialects.postgresql.rows import (
    BigIntArray,
    array_of,
    insert_into,
    insert_rows_statement,
    notify_jobs,
)
from batch_pipeline.san.job_source import JobSource
from batch_pipeline.san.tables import PENDING, holds_its_target, jobs


def fused_enqueue(conn: Connection, source: JobSource) -> FusedEnqueue | None:
    """`enqueue_fused` where it is the faster form for this source: with the target index, or
    for targets the statement creates itself (nothing to count, so no index to probe)."""
    return enqueue_fused if source.creates_targets or has_target_index(conn) else None


# -- the fused enqueue statement ---------------------------------------------------------------
def _requested_from_targets(source: JobSource):
    """A batch of target ids as the `requested` CTE: two array parameters and, with an
    eligibility, the write-time re-check of each target. Sorted by target, so the per-target
    probes walk the indexes in order."""
    requests = sorted(source.requests, key=lambda request: request.target_id)
    batch = (
        func.unnest(
            bindparam("target_ids", [r.target_id for r in requests], type_=BigIntArray),
            bindparam("retry_of_ids", [r.retry_of_job_id for r in requests], type_=BigIntArray),
        )
        .table_valued("target_id", "retry_of")
        .render_derived(name="batch")
    )
    requested = select(
        literal(source.job_type, jobs.c.job_type.type).label("job_type"),
        batch.c.target_id,
        batch.c.retry_of,
        literal(0).label("closing"),
    )
    if source.eligibility is not None:
        # A LATERAL … LIMIT 1 probe per target, by primary key: a plain join lets the planner
        # hash every row matching the predicate (all unrefined scraps) for each batch, a cost
        # that grows with the table, not the batch.
        table, predicate = source.eligibility.table, source.eligibility.predicate
        still_eligible = (
            select(literal(1).label("eligible"))
            .select_from(table)
            .where(table.c.id == batch.c.target_id, predicate)
            .limit(1)
            .lateral("still_eligible")
        )
        requested = requested.join_from(batch, still_eligible, true())
    return requested.cte("requested"), None


def _requested_from_rows(source: JobSource):
    """A data-modifying statement's RETURNING rows as the `requested` CTE, one row per
    (job_type, target_id), retrying the oldest of its rows. Every CTE reads the snapshot from
    before the statement: jobs the source closes are still active there, hence `closing`."""
    statement = (
        source.statement
        if source.statement is not None
        else insert_rows_statement(source.inserts[0], **source.inserts[1])
    )
    rows = statement.cte("source")
    job_type = (
        literal(source.job_type, jobs.c.job_type.type) if source.job_type else rows.c.job_type
    )
    target = rows.c[source.target_column]
    if source.creates_targets:  # each row is a new target: nothing to group
        requested = select(
            job_type.label("job_type"),
            target.label("target_id"),
            cast(null(), BigInteger).label("retry_of"),
            literal(0).label("closing"),
        )
        return requested.cte("requested"), rows
    retry_of = (
        func.min(rows.c[source.retry_of_column])
        if source.retry_of_column
        else cast(null(), BigInteger)
    )
    requested = (
        select(
            job_type.label("job_type"),
            target.label("target_id"),
            retry_of.label("retry_of"),
            (func.count() if source.closes_active_jobs else literal(0)).label("closing"),
        )
        .group_by(*([target] if source.job_type else [rows.c.job_type, target]))
        .cte("requested")
    )
    return requested, rows


def _counted(requested, source: JobSource):
    """Each requested target with its attempts so far and its active jobs (one index-only range
    per target on ix_san_jobs_target); new targets have no jobs, so nothing to count."""
    if source.creates_targets:
        return select(requested, literal(0).label("attempts"), literal(0).label("active_jobs")).cte(
            "counted"
        )
    return (
        select(
            requested.c.job_type,
            requested.c.target_id,
            requested.c.retry_of,
            # target_id, not id: an index-only probe
            func.count(jobs.c.target_id).label("attempts"),
            (
                func.count(jobs.c.target_id).filter(holds_its_target(jobs.c.status))
                - requested.c.closing
            ).label("active_jobs"),
        )
        .select_from(
            requested.outerjoin(
                jobs,
                and_(
                    jobs.c.target_id == requested.c.target_id,
                    jobs.c.job_type == requested.c.job_type,
                ),
            )
        )
        .group_by(
            requested.c.job_type,
            requested.c.target_id,
            requested.c.retry_of,
            requested.c.closing,
        )
        .cte("counted")
    )


def enqueue_statement(
    source: JobSource,
    now: datetime,
    max_attempts: int,
    notify_channel: str | None = None,
    skip_conflicts: bool = False,
):
    """The one statement that enqueues a batch: `requested` (from the source), the attempt and
    active counts (one index-only range per target on ix_san_jobs_target), the insert of one
    PENDING job per target with no active job and under the cap, and the announcement. Its
    one row holds labelled arrays, read by name in `enqueue_fused`."""
    requested, source_rows = (
        _requested_from_rows if source.from_rows else _requested_from_targets
    )(source)
    counted = _counted(requested, source)
    active = counted.c.active_jobs > 0
    exhausted = and_(~active, counted.c.attempts >= max_attempts) if max_attempts else false()
    # The app's own enqueue does not take the advisory lock: where SAN has a unique index on
    # active jobs (`skip_conflicts`), a job it committed after this statement's snapshot is a
    # conflict, and that target is skipped (counted as skipped_by_race), not the batch rolled back.
    insert_jobs = insert_into(jobs, skip_conflicts).from_select(
        ["job_type", "target_id", "status", "created_at", "updated_at", "retry_of_job_id"],
        select(
            counted.c.job_type,
            counted.c.target_id,
            literal(PENDING, jobs.c.status.type),
            literal(now, jobs.c.created_at.type),
            literal(now, jobs.c.updated_at.type),
            counted.c.retry_of,
        )
        .where(~active, ~exhausted)
        .order_by(counted.c.job_type, counted.c.target_id),
    )
    inserted = insert_jobs.returning(
        jobs.c.id, jobs.c.job_type, jobs.c.target_id, jobs.c.retry_of_job_id
    ).cte("inserted")
    columns = [
        *(
            array_of(inserted.c[name], inserted.c.id).label(f"created_{name}")
            for name in ("id", "job_type", "target_id", "retry_of_job_id")
        ),
        array_of(counted.c.job_type).where(active).label("active_job_type"),
        array_of(counted.c.target_id).where(active).label("active_target_id"),
        array_of(counted.c.job_type).where(exhausted).label("exhausted_job_type"),
        array_of(counted.c.target_id).where(exhausted).label("exhausted_target_id"),
        (notify_jobs(notify_channel, inserted) if notify_channel else null()).label("announced"),
    ]
    if source_rows is not None:
        order = source_rows.c[source.returned[0]]
        columns += [
            array_of(source_rows.c[name], order).label(f"source_{name}") for name in source.returned
        ]
    return select(*columns)


def enqueue_fused(
    conn: Connection,
    source: JobSource,
    *,
    now: datetime,
    max_attempts: int,
    notify_channel: str | None,
) -> dict:
    """Run `enqueue_statement`; its outcome, each array read by its name: the created jobs as
    (id, job_type, target_id, retry_of_job_id) tuples, active and exhausted (job_type,
    target_id) pairs, whether it announced, and the source's rows (by column name)."""
    statement = enqueue_statement(
        source, now, max_attempts, notify_channel, skip_conflicts=has_unique_job_index(conn)
    )
    row = conn.execute(statement).one()._mapping
    arrays = {name: value or [] for name, value in row.items() if name != "announced"}
    source_columns = (
        [arrays[f"source_{name}"] for name in source.returned] if source.from_rows else []
    )

    return {
        "created": list(
            zip(
                *(
                    arrays[f"created_{name}"]
                    for name in ("id", "job_type", "target_id", "retry_of_job_id")
                ),
                strict=True,
            )
        ),
        "already_active": list(
            zip(arrays["active_job_type"], arrays["active_target_id"], strict=True)
        ),
        "exhausted": list(
            zip(arrays["exhausted_job_type"], arrays["exhausted_target_id"], strict=True)
        ),
        "announced": row["announced"] is not None,
        "source_rows": [
            dict(zip(source.returned, values, strict=True))
            for values in zip(*source_columns, strict=True)
        ],
    }
