"""PostgreSQL: every statement and setting only PostgreSQL has.

- array binds: a batch of ids is one bigint[] parameter (`= ANY(:ids)`, `unnest(:a, :b)`), not
  thousands of placeholders the driver would build and parse;
- the fused enqueue statement: with ix_san_jobs_target, the source of a batch (the ghosts it
  closes, the summaries it creates, or a list of targets), the attempt and active counts, the
  insert and the pg_notify of the new jobs are one statement, its outcome a few arrays;
- transaction-local settings, set at the start of every transaction whatever the entry point
  (the engine's `begin` event): bounded lock and statement waits, no JIT, and every setting the
  code reads values with (DateStyle, IntervalStyle, TimeZone, extra_float_digits), so a role's
  or a database's own defaults cannot change what a value means; planner preferences;
- the advisory lock that serialises batch_pipeline's own writers.

Numbers behind these choices: docs/benchmarks.md, "Figures behind the code".
"""

from collections.abc import Mapping, Sequence
from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Integer,
    Table,
    Text,
    TypeDecorator,
    and_,
    any_,
    bindparam,
    cast,
    event,
    exists,
    false,
    func,
    insert,
    literal,
    null,
    select,
    text,
    true,
)
from sqlalchemy import (
    create_engine as sqlalchemy_engine,
)
from sqlalchemy.dialects.postgresql import ARRAY, aggregate_order_by
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection, CursorResult, Engine, Result
from sqlalchemy.engine.cursor import CursorFetchStrategy
from sqlalchemy.engine.url import URL
from sqlalchemy.sql import Executable
from sqlalchemy.sql.elements import ColumnElement

from batch_pipeline.san.dialects.interface import FusedEnqueue
from batch_pipeline.san.indexes import RecommendedIndex
from batch_pipeline.san.job_source import JobSource
from batch_pipeline.san.limits import WriteLimits
from batch_pipeline.san.tables import PENDING, Timestamp, holds_its_target, jobs

NAME = "postgresql"
URL_BACKENDS = ("postgresql", "postgres")  # postgres://: the name many hosted databases hand out
DEFAULT_DISPATCHER = "pg_notify"

# One advisory-lock key for every batch_pipeline write transaction (the ASCII of "SANBATCH").
# Holding it while re-checking and inserting means two overlapping runs can never both decide
# that a (job_type, target_id) has no active job. SAN's workers never take it.
WRITE_LOCK_KEY = 0x53414E4241544348


class _BigIntArrayLiteral(TypeDecorator):
    """A bigint[] parameter sent as one array literal, '{1,2,NULL}': psycopg's list adapter
    dumps and checks every element in Python, str.join over ints is several times faster. The
    SQL keeps its ::BIGINT[] cast, so PostgreSQL parses the literal as the array it was."""

    impl = ARRAY(BigInteger)
    cache_ok = True

    def bind_processor(self, dialect):
        def process(values):
            if values is None:
                return None
            if None in values:
                return "{" + ",".join("NULL" if v is None else str(int(v)) for v in values) + "}"
            return "{" + ",".join(map(str, map(int, values))) + "}"

        return process


BigIntArray = _BigIntArrayLiteral()


# -- connecting --------------------------------------------------------------------------------
def normalise_url(url: URL) -> URL:
    """postgres:// and postgresql:// (no driver, or psycopg2's) use psycopg 3."""
    driver = url.drivername.partition("+")[2]  # "": none named (postgres://, postgresql://)
    return url.set(
        drivername="postgresql+" + (driver if driver not in ("", "psycopg2") else "psycopg")
    )


def create_engine(url: URL) -> Engine:
    """An engine whose every transaction starts with READ_SETTINGS and the default bounds
    (the `begin` event: jobs, sensors, `doctor` and the CLI alike). application_name:
    operators see batch_pipeline's sessions in pg_stat_activity.

    No prepared statements (`prepare_threshold` None): psycopg prepares a statement on the
    server after its fifth execution on a connection, and a pooler in transaction mode
    (PgBouncer before 1.21, or without max_prepared_statements) runs the next transaction on
    another server connection, where it does not exist. Nothing of a session may outlive its
    transaction; what it costs: docs/benchmarks.md, "Figures behind the code"."""
    engine = sqlalchemy_engine(
        url,
        pool_pre_ping=True,
        connect_args={
            "connect_timeout": 10,
            "application_name": "batch_pipeline",
            "prepare_threshold": None,
        },
    )

    @event.listens_for(engine, "begin")
    def _begin(conn):
        conn.exec_driver_sql(BEGIN_SETTINGS)

    return engine


# -- transactions ------------------------------------------------------------------------------
# The session settings psycopg and the code read values with. A role or database default of
# DateStyle 'SQL, DMY' makes psycopg refuse every timestamp ("can't parse timestamptz"); UTC
# makes psycopg hand back datetime.timezone.utc, which pandas converts in C, where a ZoneInfo
# (even 'Etc/UTC') is converted value by value (docs/benchmarks.md, "Figures behind the code").
# Every SAN column is timestamptz: the instants are the same whatever the zone.
READ_SETTINGS = {
    "datestyle": "ISO, MDY",
    "intervalstyle": "postgres",
    "timezone": "UTC",
    "extra_float_digits": "1",
    # no JIT: it compiles SAN-sized queries for longer than they run
    "jit": "off",
}


def _set_locally(settings: Mapping[str, str]) -> str:
    """One statement setting each of `settings` for the current transaction only (set_config
    with is_local: a pooler in transaction mode, PgBouncer, is fine)."""
    return "SELECT " + ", ".join(
        f"set_config('{name}', '{value}', true)" for name, value in settings.items()
    )


# No parallel workers for batch_pipeline's queries: they take the cores the app's own
# transactions need (on a 2-core database the app's p99 during a recovery run halved without
# them; docs/benchmarks.md, "The app's latency while batch_pipeline heals"). A detection
# without the recommended indexes runs longer for it; with them it reads only what it needs.
LEAVE_CORES_TO_THE_APP = {"max_parallel_workers_per_gather": "0"}

_DEFAULT_LIMITS = WriteLimits()
# What every transaction of the code starts with (the benchmark's probe times statements under it).
BEGIN_SETTINGS = _set_locally(
    {
        **READ_SETTINGS,
        **LEAVE_CORES_TO_THE_APP,
        "lock_timeout": str(_DEFAULT_LIMITS.lock_timeout_ms),
        "statement_timeout": str(_DEFAULT_LIMITS.statement_timeout_ms),
    }
)


def transaction_settings(conn: Connection, limits: WriteLimits) -> None:
    """The transaction's bounds, where they are not the defaults every transaction starts with:
    a table locked by a migration or a busy batch is reported as a timeout, not waited on."""
    if (limits.lock_timeout_ms, limits.statement_timeout_ms) != (
        _DEFAULT_LIMITS.lock_timeout_ms,
        _DEFAULT_LIMITS.statement_timeout_ms,
    ):
        conn.execute(
            text(
                "SELECT set_config('lock_timeout', :lock, true), "
                "set_config('statement_timeout', :statement, true)"
            ),
            {
                "lock": str(int(limits.lock_timeout_ms)),
                "statement": str(int(limits.statement_timeout_ms)),
            },
        )


def session_defaults(conn: Connection) -> dict[str, str]:
    """What a new session of this role in this database starts with, for the settings that
    READ_SETTINGS fixes and the ones a write depends on (reset_val: the role's and database's
    defaults, not this transaction's)."""
    names = [*READ_SETTINGS, "default_transaction_read_only", "lock_timeout", "statement_timeout"]
    rows = conn.execute(
        text(
            "SELECT name, reset_val FROM pg_settings WHERE lower(name) = ANY(:names) ORDER BY name"
        ),
        {"names": names},
    ).all()
    return {name: value for name, value in rows}


def database_now(conn: Connection) -> datetime:
    """The database's clock (the transaction's start), aware."""
    return conn.execute(text("SELECT now()")).scalar_one()


def take_write_lock(conn: Connection, limits: WriteLimits) -> None:
    """Wait for batch_pipeline's other writers (another area, a TIL day of a backfill) as long
    as one of their statements may run, not `lock_timeout`: that bound is for the app's locks
    (a migration holding a table), and a queue of our own busy batches is no such thing. Then
    `lock_timeout` again for every table lock of the batch."""
    conn.execute(
        text("SELECT set_config('lock_timeout', :wait, true)"),
        {"wait": str(int(limits.statement_timeout_ms))},
    )
    conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": WRITE_LOCK_KEY})
    conn.execute(
        text("SELECT set_config('lock_timeout', :lock, true)"),
        {"lock": str(int(limits.lock_timeout_ms))},
    )


def prefer_the_indexes(index_names: Sequence[str]):
    """A statement turning sequential scans off for the rest of the transaction, if every index
    in `index_names` exists (without them it would push the planner to read a whole table
    through some other index). For detection queries whose index plan the planner prices about
    even with a full scan at SAN's size."""
    exist = " AND ".join(_is_valid(name) for name in index_names)
    return text(f"SELECT set_config('enable_seqscan', 'off', true) WHERE {exist}")


def prefer_index_plans(conn: Connection, index_names: Sequence[str]) -> None:
    if index_names:
        conn.execute(prefer_the_indexes(index_names))


def _indexes_where(conn: Connection, index_names: Sequence[str], condition: str) -> list[str]:
    """The names of `index_names` (in their order) for which `condition` holds, `name` bound."""
    return list(
        conn.execute(
            text(
                "SELECT name FROM unnest(CAST(:names AS text[])) WITH ORDINALITY AS n(name, "
                "position) "
                f"WHERE {condition} ORDER BY position"
            ),
            {"names": list(index_names)},
        ).scalars()
    )


def missing_valid_indexes(conn: Connection, index_names: Sequence[str]) -> list[str]:
    """Which of these indexes do not exist or are INVALID (what an interrupted CREATE INDEX
    CONCURRENTLY leaves: present in the catalog, never used by the planner)."""
    return _indexes_where(
        conn,
        index_names,
        "NOT EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass(name) AND indisvalid)",
    )


def invalid_indexes(conn: Connection, index_names: Sequence[str]) -> list[str]:
    """Which of these indexes exist but are INVALID."""
    return _indexes_where(
        conn,
        index_names,
        "EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass(name) AND NOT indisvalid)",
    )


def _is_valid(name: str) -> str:
    return (
        f"EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass('{name}') AND indisvalid)"
    )


def create_index_statement(index: RecommendedIndex) -> str:
    """CONCURRENTLY: the build does not block the app's writes (it must run outside a
    transaction: run_index_statements)."""
    unique = "UNIQUE " if index.unique else ""
    return f"CREATE {unique}INDEX CONCURRENTLY IF NOT EXISTS {index.name} ON {index.postgresql}"


def drop_index_statement(name: str) -> str:
    return f"DROP INDEX CONCURRENTLY IF EXISTS {name}"


def run_index_statements(engine: Engine, statements: Sequence[str]) -> None:
    """Outside a transaction (CONCURRENTLY needs it), with statement_timeout off for this
    session: a role's timeout would cancel the build of a big index half-way and leave it
    INVALID."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("SET statement_timeout = 0"))
        for statement in statements:
            conn.execute(text(statement))


def table_bytes(conn: Connection, table_names: Sequence[str]) -> int:
    """pg_total_relation_size: heap, TOAST and indexes."""
    return conn.execute(
        text(
            "SELECT coalesce(sum(pg_total_relation_size(to_regclass(name))), 0) "
            "FROM unnest(CAST(:names AS text[])) AS name"
        ),
        {"names": list(table_names)},
    ).scalar_one()


def column_type_problem(declared: Column, found) -> str | None:
    """A column batch_pipeline reads as an instant (TIMESTAMPTZ) that the database holds as a
    wall-clock time (TIMESTAMP WITHOUT TIME ZONE): every age would be off by an offset."""
    if (
        isinstance(declared.type, DateTime)
        and declared.type.timezone
        and getattr(found, "timezone", True) is False
    ):
        return (
            "is TIMESTAMP WITHOUT TIME ZONE; batch_pipeline needs TIMESTAMPTZ (a naive timestamp "
            "is read in the session's zone, and every age would be off by its offset)"
        )
    return None


def missing_privileges(conn: Connection, required: Sequence[tuple[str, str]]) -> list[str]:
    """Of the (table, privilege) pairs, those this role lacks; and USAGE on the id sequences of
    the tables it inserts into (a SELECT-only role would pass every other check and fail the
    first write)."""
    missing = [
        f"{action} on {table}"
        for table, action in required
        if not conn.execute(
            text("SELECT has_table_privilege(:table, :action)"), {"table": table, "action": action}
        ).scalar_one()
    ]
    for table in sorted({table for table, action in required if action == "INSERT"}):
        sequence = conn.execute(
            text("SELECT pg_get_serial_sequence(:table, 'id')"), {"table": table}
        ).scalar_one()
        if (
            sequence
            and not conn.execute(
                text("SELECT has_sequence_privilege(:sequence, 'USAGE')"), {"sequence": sequence}
            ).scalar_one()
        ):
            missing.append(f"USAGE on sequence {sequence}")
    return missing


def has_target_index(conn: Connection) -> bool:
    """Whether ix_san_jobs_target exists and is valid (cached per database connection). The fused
    statement probes it per target; without it that statement would scan the whole jobs table once
    per batch with no parallel workers (a data-modifying statement gets none), so the portable count
    query + insert is the faster path there."""
    if "batch_pipeline.has_target_index" not in conn.info:
        conn.info["batch_pipeline.has_target_index"] = conn.execute(
            text(f"SELECT {_is_valid('ix_san_jobs_target')}")
        ).scalar_one()
    return conn.info["batch_pipeline.has_target_index"]


def has_unique_job_index(conn: Connection) -> bool:
    """Whether `jobs` has a unique index besides its primary key (SAN's guarantee of one active
    job per target, cached per connection). Only then can a job insert conflict, and only then
    do the inserts pay for ON CONFLICT's speculative insertion."""
    if "batch_pipeline.has_unique_job_index" not in conn.info:
        conn.info["batch_pipeline.has_unique_job_index"] = conn.execute(
            text(
                "SELECT EXISTS (SELECT 1 FROM pg_index WHERE indrelid = to_regclass('jobs') "
                "AND indisunique AND NOT indisprimary)"
            )
        ).scalar_one()
    return conn.info["batch_pipeline.has_unique_job_index"]


def fused_enqueue(conn: Connection, source: JobSource) -> FusedEnqueue | None:
    """`enqueue_fused` where it is the faster form for this source: with the target index, or
    for targets the statement creates itself (nothing to count, so no index to probe)."""
    return enqueue_fused if source.creates_targets or has_target_index(conn) else None


def plain_rows(result: Result) -> list[tuple]:
    """Every row of `result` as psycopg's own tuples, in one fetch. psycopg decodes ints, text
    and timestamptz itself, and wrapping each row in a SQLAlchemy Row cost more than the fetch
    (docs/benchmarks.md, "Figures behind the code"). A result SQLAlchemy buffers itself
    (streamed or fully buffered) is read through SQLAlchemy."""
    if isinstance(result, CursorResult) and type(result.cursor_strategy) is CursorFetchStrategy:
        try:
            return result.cursor.fetchall()
        finally:
            result.close()
    return result.tuples().all()


# -- expressions -------------------------------------------------------------------------------
def id_in(column: ColumnElement, ids: Sequence[int]) -> ColumnElement:
    """`column IN ids`, as one array parameter."""
    return column == any_(bindparam(None, [int(i) for i in ids], type_=BigIntArray))


def minutes_since(instant: datetime, column: ColumnElement) -> ColumnElement:
    return cast(
        func.floor(func.extract("epoch", literal(instant, Timestamp) - column) / 60), Integer
    )


def array_of(column, order_by=None):
    """A scalar subquery aggregating `column` into one array (in `order_by` order): a batch's
    outcome comes back as a few arrays in one row, decoded far faster than rows."""
    return select(
        func.array_agg(column if order_by is None else aggregate_order_by(column, order_by))
    ).scalar_subquery()


def notify_jobs(channel: str, new_jobs):
    """A scalar subquery that sends one pg_notify per row of `new_jobs` (anything with id,
    job_type and target_id columns, e.g. an INSERT … RETURNING CTE), in id order, and counts
    them. The payloads are built by PostgreSQL from the rows themselves."""
    ordered = (
        select(new_jobs.c.id, new_jobs.c.job_type, new_jobs.c.target_id)
        .order_by(new_jobs.c.id)
        .subquery()
    )
    payload = func.json_build_object(
        "job_id", ordered.c.id, "job_type", ordered.c.job_type, "target_id", ordered.c.target_id
    )
    return select(
        func.count(func.pg_notify(literal(channel), cast(payload, Text)))
    ).scalar_subquery()


def announce_statement(channel: str) -> Executable:
    """For write paths that could not announce in their own statement: pg_notify for the jobs
    whose ids are bound as `job_ids` (one bigint array), payloads built from the rows; in the
    transaction, so delivered exactly when the jobs commit."""
    return select(
        notify_jobs(
            channel,
            select(jobs.c.id, jobs.c.job_type, jobs.c.target_id)
            .where(jobs.c.id == any_(bindparam("job_ids", type_=BigIntArray)))
            .subquery(),
        )
    )


# -- inserts -----------------------------------------------------------------------------------
def insert_into(table: Table, skip_conflicts: bool = False):
    """INSERT INTO `table`, with `skip_conflicts` ON CONFLICT DO NOTHING. SQLAlchemy caches the
    compiled SQL of a core insert but never of the dialect's Insert (which ON CONFLICT needs):
    with it every write batch compiled its whole statement again (docs/benchmarks.md, "Figures
    behind the code"), so the dialect's form is used only when a conflict clause is."""
    return pg_insert(table).on_conflict_do_nothing() if skip_conflicts else insert(table)


def insert_rows_statement(
    table: Table,
    constants: Mapping[str, object],
    id_columns: Mapping[str, Sequence[int | None]],
    returning: Sequence[str],
    skip_conflicts: bool = False,
    referenced: Mapping[str, Column] | None = None,
):
    """INSERT … SELECT … FROM unnest(:a, :b) … RETURNING: one row per position of the
    `id_columns` lists, two array parameters whatever the batch size; to run, or to use as a
    CTE of a larger statement. `skip_conflicts`: ON CONFLICT DO NOTHING (see enqueue_statement).
    `referenced` ({"user_id": users.c.id}): a position whose referenced row is gone is skipped,
    in the same statement, instead of failing the insert on its foreign key."""
    names = list(id_columns)
    arrays = (
        func.unnest(*(bindparam(None, list(id_columns[name]), type_=BigIntArray) for name in names))
        .table_valued(*names)
        .render_derived(name="batch")
    )
    source = select(
        *(literal(value, table.c[name].type).label(name) for name, value in constants.items()),
        *(arrays.c[name] for name in names),
    ).where(
        *(exists().where(column == arrays.c[name]) for name, column in (referenced or {}).items())
    )
    statement = insert_into(table, skip_conflicts).from_select([*constants, *names], source)
    return statement.returning(*(table.c[name] for name in returning))


def insert_rows(
    conn: Connection, table: Table, constants, id_columns, returning, referenced=None
) -> list[dict]:
    """Insert one row per position of the `id_columns` lists; the `returning` columns by name.
    Into `jobs` where SAN has a unique index on it, a conflicting row is skipped."""
    if not any(id_columns.values()):
        return []
    skip = table is jobs and has_unique_job_index(conn)
    statement = insert_rows_statement(
        table, constants, id_columns, returning, skip_conflicts=skip, referenced=referenced
    )
    return [dict(row) for row in conn.execute(statement).mappings()]


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
    if source.creates_targets:  # new targets have no jobs: nothing to count
        counted = select(
            requested, literal(0).label("attempts"), literal(0).label("active_jobs")
        ).cte("counted")
    else:
        counted = (
            select(
                requested.c.job_type,
                requested.c.target_id,
                requested.c.retry_of,
                func.count(jobs.c.target_id).label(
                    "attempts"
                ),  # target_id, not id: an index-only probe
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
