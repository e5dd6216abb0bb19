"""PostgreSQL arrays, expressions, inserts and row decoding: a batch of ids is one bigint[]
parameter, not thousands of placeholders; rows come back as psycopg's own tuples."""

from collections.abc import Mapping, Sequence
from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Column,
    Integer,
    Table,
    Text,
    TypeDecorator,
    any_,
    bindparam,
    cast,
    exists,
    func,
    insert,
    literal,
    select,
)
from sqlalchemy.dialects.postgresql import ARRAY, aggregate_order_by
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection, CursorResult, Result
from sqlalchemy.engine.cursor import CursorFetchStrategy
from sqlalchemy.sql import Executable
from sqlalchemy.sql.elements import ColumnElement

from batch_pipeline.san.dialects.postgresql.catalog import has_unique_job_index
from batch_pipeline.san.tables import Timestamp, jobs


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
