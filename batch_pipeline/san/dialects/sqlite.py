"""SQLite (the embedded demo database and the test suite): the portable forms, and the one
setting that makes its writers safe.

pysqlite starts transactions lazily and upgrades read locks to write locks late, so two writers
could both read "no active job" before either writes. BEGIN IMMEDIATE takes the database's
write lock at the start of every transaction instead: that serialises batch_pipeline's writers
as PostgreSQL's advisory lock does.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sqlalchemy import Integer, Table, cast, event, func, insert, literal, select, text
from sqlalchemy.engine import Connection, Engine, Result
from sqlalchemy.sql.elements import ColumnElement

from batch_pipeline.san.schema import Timestamp

if TYPE_CHECKING:
    from batch_pipeline.san.database import WriteLimits

NAME = "sqlite"


def configure_engine(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection, _record):
        dbapi_connection.isolation_level = None
        dbapi_connection.execute("PRAGMA foreign_keys = ON")

    @event.listens_for(engine, "begin")
    def _begin(conn):
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def transaction_settings(conn: Connection, limits: WriteLimits) -> None:
    """Nothing to set: the engine's busy timeout bounds the wait for the write lock, and
    timestamps are stored and read as UTC."""


def database_now(conn: Connection) -> datetime:
    """The database's clock: SQLite's own 'now' (UTC, to the millisecond), aware."""
    value = conn.exec_driver_sql("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')").scalar_one()
    return datetime.fromisoformat(value).replace(tzinfo=UTC)


def take_write_lock(conn: Connection, limits: WriteLimits) -> None:
    """Nothing to take: BEGIN IMMEDIATE (configure_engine) already holds the write lock."""


def prefer_index_plans(conn: Connection, index_names: Sequence[str]) -> None:
    """SQLite's planner has no such setting."""


def missing_valid_indexes(conn: Connection, index_names: Sequence[str]) -> list[str]:
    """Which of these indexes do not exist (SQLite has no invalid indexes)."""
    present = set(
        conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'index'")).scalars()
    )
    return [name for name in index_names if name not in present]


def invalid_indexes(conn: Connection, index_names: Sequence[str]) -> list[str]:
    return []


def can_fuse(conn: Connection, source) -> bool:
    return False  # the fused enqueue statement is PostgreSQL's


def plain_rows(result: Result) -> list[tuple]:
    """Every row of `result`, in one fetch, through SQLAlchemy: SQLite hands back timestamps as
    text, which SQLAlchemy's result processing turns into datetimes."""
    return result.tuples().all()


def id_in(column: ColumnElement, ids: Sequence[int]) -> ColumnElement:
    return column.in_([int(i) for i in ids])


def minutes_since(instant: datetime, column: ColumnElement) -> ColumnElement:
    # julianday() is a float: round to whole seconds first, so 120 min is not 119.9999 min.
    seconds = cast(
        func.round((func.julianday(literal(instant, Timestamp)) - func.julianday(column)) * 86400),
        Integer,
    )
    return seconds // 60


def insert_rows(
    conn: Connection, table: Table, constants, id_columns, returning, referenced=None
) -> list[dict]:
    """Insert one row per position of the `id_columns` lists (an executemany); the
    `returning` columns of the new rows by name, in the order given. `referenced`: a position
    whose referenced row is gone is skipped (read first, in the same transaction, which holds
    SQLite's write lock)."""
    names = list(id_columns)
    if not any(id_columns.values()):
        return []
    rows = [
        {**constants, **dict(zip(names, values, strict=True))}
        for values in zip(*(id_columns[name] for name in names), strict=True)
    ]
    for name, column in (referenced or {}).items():
        present = set(
            conn.execute(select(column).where(id_in(column, [row[name] for row in rows]))).scalars()
        )
        rows = [row for row in rows if row[name] in present]
    if not rows:
        return []
    returned = [table.c[name] for name in returning]
    statement = insert(table).returning(*returned, sort_by_parameter_order=True)
    return [dict(row) for row in conn.execute(statement, rows).mappings()]
