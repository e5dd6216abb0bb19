"""Dialect helpers that keep batches set-based *and* cheap to send.

A batch of 1,000 ids as `IN (:id_1, …, :id_1000)` or a 1,000-row multi-VALUES INSERT costs more
in the driver (building and parsing thousands of placeholders) than in PostgreSQL itself. On
PostgreSQL one array parameter (`= ANY(:ids)`, `unnest(:ids)`) carries the whole batch; SQLite
(the embedded demo) keeps the portable forms.
"""

from collections.abc import Mapping, Sequence

from sqlalchemy import BigInteger, Table, TypeDecorator, any_, bindparam, func, insert, literal, select, text
from sqlalchemy.dialects.postgresql import ARRAY, aggregate_order_by
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement


class _BigIntArrayLiteral(TypeDecorator):
    """A PostgreSQL bigint[] parameter sent as one array literal, '{1,2,NULL}'.

    psycopg's list adapter dumps and regex-checks every element in Python (~1 µs each, 5 ms
    per 5,000-id batch, several arrays per batch); str.join over ints is ~5 x faster. The SQL
    keeps its ::BIGINT[] cast, so PostgreSQL parses the literal as the array it was.
    """

    impl = ARRAY(BigInteger)
    cache_ok = True

    def bind_processor(self, dialect):
        def process(values):
            if values is None:
                return None
            return "{" + ",".join("NULL" if v is None else str(int(v)) for v in values) + "}"

        return process


BigIntArray = _BigIntArrayLiteral()


def id_in(conn: Connection, column: ColumnElement, ids: Sequence[int]) -> ColumnElement:
    """`column IN ids`, as one array parameter on PostgreSQL."""
    ids = [int(i) for i in ids]
    if conn.dialect.name == "postgresql":
        return column == any_(bindparam(None, ids, type_=BigIntArray))
    return column.in_(ids)


def insert_rows(
    conn: Connection,
    table: Table,
    constants: Mapping[str, object],
    id_columns: Mapping[str, Sequence[int | None]],
    returning: Sequence[str],
) -> list[tuple]:
    """Insert one row per position of the `id_columns` lists, with `constants` in every row.

    PostgreSQL: a single INSERT … SELECT … FROM unnest(:a, :b), two array parameters whatever
    the batch size. SQLite: an executemany. Returns the `returning` columns of the new rows.
    """
    names = list(id_columns)
    lengths = {len(values) for values in id_columns.values()}
    if lengths == {0}:
        return []
    returned = [table.c[name] for name in returning]
    if conn.dialect.name == "postgresql":
        return conn.execute(insert_rows_statement(table, constants, id_columns, returning)).tuples().all()
    rows = [{**constants, **dict(zip(names, values))} for values in zip(*(id_columns[name] for name in names))]
    return conn.execute(insert(table).returning(*returned, sort_by_parameter_order=True), rows).tuples().all()


def array_of(column, order_by=None):
    """PostgreSQL: a scalar subquery aggregating `column` into one array (in `order_by` order):
    a batch's outcome comes back as a few arrays in one row, decoded far faster than rows."""
    return select(func.array_agg(column if order_by is None else aggregate_order_by(column, order_by))).scalar_subquery()


def insert_rows_statement(
    table: Table, constants: Mapping[str, object], id_columns: Mapping[str, Sequence[int | None]], returning: Sequence[str]
):
    """PostgreSQL: insert_rows as one INSERT … SELECT … FROM unnest(:a, :b) … RETURNING, to run
    or to use as a CTE of a larger statement."""
    names = list(id_columns)
    arrays = func.unnest(
        *(bindparam(None, list(id_columns[name]), type_=BigIntArray) for name in names)
    ).table_valued(*names).render_derived(name="batch")
    source = select(
        *(literal(value, table.c[name].type).label(name) for name, value in constants.items()),
        *(arrays.c[name] for name in names),
    )
    return insert(table).from_select([*constants, *names], source).returning(*(table.c[name] for name in returning))


def prefer_the_indexes(index_names: Sequence[str]):
    """PostgreSQL: a statement turning sequential scans off for the rest of the transaction,
    if every index in `index_names` exists (without them it would push the planner to read a
    whole table through some other index instead). For detection queries whose index plan the
    planner prices about even with a full scan at SAN's size (docs/benchmarks.md)."""
    exist = " AND ".join(f"to_regclass('{name}') IS NOT NULL" for name in index_names)
    return text(f"SELECT set_config('enable_seqscan', 'off', true) WHERE {exist}")


def prefer_index_plans(conn: Connection, index_names: Sequence[str]) -> None:
    """Run `prefer_the_indexes(index_names)` in this transaction, on PostgreSQL (SQLite has no
    such setting); nothing when no indexes are named."""
    if index_names and conn.dialect.name == "postgresql":
        conn.execute(prefer_the_indexes(index_names))
