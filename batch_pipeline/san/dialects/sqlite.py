"""SQLite (the embedded demo database and the test suite): the portable forms, and the one
setting that makes its writers safe.

pysqlite starts transactions lazily and upgrades read locks to write locks late, so two writers
could both read "no active job" before either writes. BEGIN IMMEDIATE takes the database's
write lock at the start of every transaction instead: that serialises batch_pipeline's writers
as PostgreSQL's advisory lock does.
"""

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Column, Integer, Table, cast, event, func, insert, literal, select, text
from sqlalchemy import create_engine as sqlalchemy_engine
from sqlalchemy.engine import Connection, Engine, Result
from sqlalchemy.engine.url import URL
from sqlalchemy.sql.elements import ColumnElement

from batch_pipeline.san.dialects.interface import FusedEnqueue
from batch_pipeline.san.indexes import RecommendedIndex
from batch_pipeline.san.job_source import JobSource
from batch_pipeline.san.limits import WriteLimits
from batch_pipeline.san.tables import Timestamp

NAME = "sqlite"
URL_BACKENDS = ("sqlite",)
DEFAULT_DISPATCHER = "none"  # no announcements: workers poll


def normalise_url(url: URL) -> URL:
    return url


def create_engine(url: URL) -> Engine:
    """An engine on the file (its folder made), waiting up to 30 s for the write lock, every
    transaction BEGIN IMMEDIATE, foreign keys enforced."""
    database = url.database
    if database and database != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    engine = sqlalchemy_engine(url, connect_args={"timeout": 30})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection, _record):
        dbapi_connection.isolation_level = None
        dbapi_connection.execute("PRAGMA foreign_keys = ON")

    @event.listens_for(engine, "begin")
    def _begin(conn):
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def transaction_settings(conn: Connection, limits: WriteLimits) -> None:
    """Nothing to set: the engine's busy timeout bounds the wait for the write lock, and
    timestamps are stored and read as UTC."""


def database_now(conn: Connection) -> datetime:
    """The database's clock: SQLite's own 'now' (UTC, to the millisecond), aware."""
    value = conn.exec_driver_sql("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')").scalar_one()
    return datetime.fromisoformat(value).replace(tzinfo=UTC)


def session_defaults(conn: Connection) -> dict[str, str]:
    """SQLite has no session settings the code depends on."""
    return {}


def take_write_lock(conn: Connection, limits: WriteLimits) -> None:
    """Nothing to take: BEGIN IMMEDIATE (create_engine) already holds the write lock."""


def avoid_full_scans(conn: Connection, index_names: Sequence[str]) -> None:
    """SQLite's planner has no such setting."""


def missing_valid_indexes(conn: Connection, index_names: Sequence[str]) -> list[str]:
    """Which of these indexes do not exist (SQLite has no invalid indexes)."""
    present = set(
        conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'index'")).scalars()
    )
    return [name for name in index_names if name not in present]


def invalid_indexes(conn: Connection, index_names: Sequence[str]) -> list[str]:
    return []


INDEX_SQL = text("SELECT tbl_name, sql FROM sqlite_master WHERE type = 'index' AND name = :name")


def index_definition_problems(
    conn: Connection, indexes: Sequence[RecommendedIndex]
) -> dict[str, str]:
    """Of `indexes`, those present by name whose definition is not the recommended one: SQLite
    keeps each index's DDL as written (less IF NOT EXISTS); compared from ON on, white space
    folded."""
    problems = {}
    for index in indexes:
        row = conn.execute(INDEX_SQL, {"name": index.name}).first()
        if row is None:
            continue
        table, sql = row
        found = " ".join((sql or "").split(" ON ", 1)[-1].split())
        unique = (sql or "").upper().startswith("CREATE UNIQUE")
        if (
            table != index.table
            or unique != index.unique
            or found != " ".join(index.sqlite.split())
        ):
            problems[index.name] = sql or "(no DDL)"
    return problems


@contextmanager
def index_build_lock(engine: Engine) -> Iterator[None]:
    """Nothing to hold: SQLite builds every index inside one write transaction."""
    yield


def create_index_statement(index: RecommendedIndex) -> str:
    unique = "UNIQUE " if index.unique else ""
    return f"CREATE {unique}INDEX IF NOT EXISTS {index.name} ON {index.sqlite}"


def drop_index_statement(name: str) -> str:
    return f"DROP INDEX IF EXISTS {name}"


def run_index_statements(engine: Engine, statements: Sequence[str]) -> None:
    """In one transaction: SQLite builds an index while holding the write lock anyway."""
    with engine.begin() as conn:
        for statement in statements:
            conn.execute(text(statement))


def table_bytes(conn: Connection, table_names: Sequence[str]) -> int:
    """The whole database file: SQLite keeps every table in it (no size per table without the
    dbstat extension)."""
    pages = conn.exec_driver_sql("PRAGMA page_count").scalar_one()
    return pages * conn.exec_driver_sql("PRAGMA page_size").scalar_one()


def column_type_problem(declared: Column, found) -> str | None:
    """SQLite reflects no time zone: it stores what the pipeline writes, UTC text."""
    return None


def missing_privileges(conn: Connection, required: Sequence[tuple[str, str]]) -> list[str]:
    """SQLite has no privileges: whoever can open the file can write it."""
    return []


def fused_enqueue(conn: Connection, source: JobSource) -> FusedEnqueue | None:
    """None: the fused enqueue statement is PostgreSQL's; batches take the portable path."""
    return None


def announce_statement(channel: str) -> None:
    """None: SQLite cannot announce inside a transaction (no pg_notify)."""
    return None


def read_load(engine: Engine) -> None:
    """None: an embedded file has no other sessions to measure or protect; the throttle keeps
    the batch-time rule (san/throttle.py)."""
    return None


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
