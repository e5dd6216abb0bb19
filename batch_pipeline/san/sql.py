"""Dialect helpers that keep batches set-based *and* cheap to send.

A batch of 1,000 ids as `IN (:id_1, …, :id_1000)` or a 1,000-row multi-VALUES INSERT costs more
in the driver (building and parsing thousands of placeholders) than in PostgreSQL itself. On
PostgreSQL one array parameter (`= ANY(:ids)`, `unnest(:ids)`) carries the whole batch; SQLite
(the embedded demo) keeps the portable forms.
"""

from collections.abc import Mapping, Sequence

from sqlalchemy import BigInteger, Table, any_, bindparam, func, insert, literal, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

BigIntArray = ARRAY(BigInteger)


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
        arrays = func.unnest(
            *(bindparam(None, [None if v is None else int(v) for v in id_columns[name]], type_=BigIntArray) for name in names)
        ).table_valued(*names).render_derived(name="batch")
        source = select(
            *(literal(value, table.c[name].type).label(name) for name, value in constants.items()),
            *(arrays.c[name] for name in names),
        )
        statement = insert(table).from_select([*constants, *names], source).returning(*returned)
        return conn.execute(statement).tuples().all()
    rows = [{**constants, **dict(zip(names, values))} for values in zip(*(id_columns[name] for name in names))]
    return conn.execute(insert(table).returning(*returned, sort_by_parameter_order=True), rows).tuples().all()
