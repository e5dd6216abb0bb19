"""Connecting to the SAN database and writing to it safely.

Every write batch runs in `write_transaction`: one transaction, bounded lock and statement
timeouts, and a lock that serialises batch_pipeline's own writers (two overlapping runs) without
ever blocking SAN's workers.
"""

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.engine.url import URL
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

from batch_pipeline.san.dialects import dialect, sqlite

# Rows per write transaction: small enough that a batch holds its locks briefly, large enough
# that a round trip is amortised (docs/benchmarks.md, "Figures behind the code").
BATCH_SIZE = 5_000
LOCK_TIMEOUT_MS = 5_000
STATEMENT_TIMEOUT_MS = 120_000


class SanConnectionError(RuntimeError):
    """SAN_DATABASE_URL is malformed, names an unsupported database, or cannot be reached."""


def utc_now() -> datetime:
    """This host's clock. The pipeline judges ages and stamps jobs with `database_now`; this is
    for what is not the SAN database's business (and the sandbox, which plays the app)."""
    return datetime.now(UTC)


def database_now(bind: Connection | Engine) -> datetime:
    """The SAN database's clock. One clock for detection and writes: a Dagster host whose clock
    is off cannot misjudge a job's age or stamp a job in the database's future."""
    if isinstance(bind, Engine):
        with bind.connect() as conn:
            return dialect(conn).database_now(conn)
    return dialect(bind).database_now(bind)


def default_data_dir() -> Path:
    """Where the embedded default keeps its SQLite file (`SAN_DATA_DIR`, else ./data)."""
    return Path(os.environ.get("SAN_DATA_DIR") or Path.cwd() / "data")


def embedded_database_url() -> str:
    return f"sqlite:///{default_data_dir() / 'san.sqlite'}"


# Query parameters that carry a secret (libpq's ?password=, and its kin).
SECRET_QUERY_KEYS = frozenset({"password", "sslpassword", "passwd", "pwd"})


def redacted(url: str | URL) -> str:
    """A URL fit to print, log, raise or store: its password and any secret query parameter
    masked. Every URL batch_pipeline shows (SAN's, Redis's) goes through here."""
    try:
        parsed = make_url(url)
        query = {
            key: ("***" if key.lower() in SECRET_QUERY_KEYS else value)
            for key, value in parsed.query.items()
        }
        return (
            parsed.set(query=query).render_as_string(hide_password=True).replace("%2A%2A%2A", "***")
        )
    except (ArgumentError, ValueError):
        return "<unparseable URL>"


def parse_database_url(url: str) -> URL:
    """Parse and normalise a SAN database URL: a plain postgresql:// URL, and the postgres://
    many hosted databases hand out, use psycopg 3."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as error:
        raise SanConnectionError(
            f"SAN_DATABASE_URL is not a valid SQLAlchemy URL ({error}); expected e.g. "
            "postgresql+psycopg://user:password@host:5432/san or sqlite:///path/to/san.sqlite"
        ) from error
    # Heroku, Render, Supabase...: PostgreSQL by its old name
    if parsed.get_backend_name() == "postgres":
        parsed = parsed.set(
            drivername="postgresql+" + parsed.get_driver_name()
            if "+" in parsed.drivername
            else "postgresql"
        )
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        if parsed.get_driver_name() in ("", "psycopg2"):
            parsed = parsed.set(drivername="postgresql+psycopg")
    elif backend != "sqlite":
        raise SanConnectionError(
            f"SAN_DATABASE_URL {redacted(parsed)} names the '{backend}' database; batch_pipeline "
            "supports PostgreSQL (postgresql+psycopg://…) and SQLite (sqlite:///…)"
        )
    return parsed


def create_san_engine(url: str) -> Engine:
    """An Engine for the SAN database. Does not connect yet: see `check_connection`."""
    parsed = parse_database_url(url)
    try:
        if parsed.get_backend_name() == "sqlite":
            database = parsed.database
            if database and database != ":memory:":
                Path(database).parent.mkdir(parents=True, exist_ok=True)
            engine = create_engine(parsed, connect_args={"timeout": 30})
            sqlite.configure_engine(engine)
        else:
            # application_name: operators see batch_pipeline's sessions in pg_stat_activity
            engine = create_engine(
                parsed,
                pool_pre_ping=True,
                connect_args={"connect_timeout": 10, "application_name": "batch_pipeline"},
            )
    except (ArgumentError, NoSuchModuleError) as error:
        raise SanConnectionError(
            f"cannot use SAN_DATABASE_URL {redacted(parsed)}: {error}"
        ) from error
    return engine


def check_connection(engine: Engine) -> None:
    """Connect once; raise SanConnectionError naming the server and the reason."""
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except SQLAlchemyError as error:
        reason = str(getattr(error, "orig", None) or error).strip().splitlines()[0]
        raise SanConnectionError(
            f"cannot connect to the SAN database at {redacted(engine.url)}: {reason}"
        ) from error


@dataclass(frozen=True)
class WriteLimits:
    """Bounds for one transaction (detection or a write batch), so a locked or busy table is
    reported, never waited on forever."""

    lock_timeout_ms: int = LOCK_TIMEOUT_MS
    statement_timeout_ms: int = STATEMENT_TIMEOUT_MS


@contextmanager
def read_transaction(engine: Engine, limits: WriteLimits = WriteLimits()) -> Iterator[Connection]:
    """Detection: one read-only transaction with the same bounded waits as the writes."""
    with engine.begin() as conn:
        dialect(conn).transaction_settings(conn, limits)
        yield conn


@contextmanager
def write_transaction(engine: Engine, limits: WriteLimits = WriteLimits()) -> Iterator[Connection]:
    """One batch: a transaction that commits everything or nothing."""
    with engine.begin() as conn:
        sql = dialect(conn)
        sql.transaction_settings(conn, limits)
        # serialises batch_pipeline's writers, never SAN's workers
        sql.take_write_lock(conn, limits)
        yield conn
