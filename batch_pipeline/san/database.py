"""Connecting to the SAN database and writing to it safely.

Every write batch runs in `write_transaction`: one transaction, bounded lock and statement
timeouts, and a lock that serialises batch_pipeline's own writers (two overlapping runs) without
ever blocking SAN's workers. How each database does it is its dialect's (san/dialects/).
"""

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.engine.url import URL
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

from batch_pipeline.san.dialects import BY_URL_BACKEND, dialect
from batch_pipeline.san.limits import WriteLimits
from batch_pipeline.san.settings import Setting


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


SAN_DATABASE_URL = Setting(
    "SAN_DATABASE_URL",
    "embedded SQLite at `./data/san.sqlite`",
    "SQLAlchemy URL of the SAN database (`postgresql+psycopg://…`; a plain `postgresql://`, and "
    "the `postgres://` many hosted databases hand out, use psycopg 3 too)",
    secret=True,
)
SAN_DATA_DIR = Setting(
    "SAN_DATA_DIR",
    "`./data`",
    "where the embedded default lives (the demo of `make run`)",
    loaded_with_the_code=False,
)


def default_data_dir() -> Path:
    """Where the embedded default keeps its SQLite file (`SAN_DATA_DIR`, else ./data)."""
    return Path(SAN_DATA_DIR.raw() or Path.cwd() / "data")


def san_kinds() -> set[str]:
    """The kind the catalog shows each SAN asset with (Dagster's `kinds`, an icon): the
    database its rows live in, `postgres` or, on the embedded default, `sqlite`."""
    url = SAN_DATABASE_URL.raw() or "sqlite:"
    return {"sqlite" if url.startswith("sqlite") else "postgres"}


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
    db_dialect = BY_URL_BACKEND.get(parsed.get_backend_name())
    if db_dialect is None:
        raise SanConnectionError(
            f"SAN_DATABASE_URL {redacted(parsed)} names the '{parsed.get_backend_name()}' "
            "database; batch_pipeline supports PostgreSQL (postgresql+psycopg://…) and SQLite (sqlite:///…)"
        )
    return db_dialect.normalise_url(parsed)


def create_san_engine(url: str) -> Engine:
    """An Engine for the SAN database. Does not connect yet: see `check_connection`."""
    parsed = parse_database_url(url)
    try:
        engine = BY_URL_BACKEND[parsed.get_backend_name()].create_engine(parsed)
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


@contextmanager
def read_transaction(engine: Engine, limits: WriteLimits = WriteLimits()) -> Iterator[Connection]:
    """Detection: one transaction with the same bounded waits as the writes (every transaction
    starts with the dialect's read settings, see postgresql.create_engine)."""
    with engine.begin() as conn:
        dialect(conn).transaction_settings(conn, limits)
        yield conn


@contextmanager
def write_transaction(engine: Engine, limits: WriteLimits = WriteLimits()) -> Iterator[Connection]:
    """One batch: a transaction that commits everything or nothing."""
    with engine.begin() as conn:
        db_dialect = dialect(conn)
        db_dialect.transaction_settings(conn, limits)
        # serialises batch_pipeline's writers, never SAN's workers
        db_dialect.take_write_lock(conn, limits)
        yield conn
