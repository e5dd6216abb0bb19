"""PostgreSQL sessions: the engine, the settings every transaction starts with (bounded waits,
no JIT, the formats the code reads values in, no parallel workers, early writeback), and the
advisory lock that serialises batch_pipeline's own writers."""

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import (
    create_engine as sqlalchemy_engine,
)
from sqlalchemy import (
    event,
    text,
)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.engine.url import URL

from batch_pipeline.san.limits import WriteLimits

# One advisory-lock key for every batch_pipeline write transaction (the ASCII of "SANBATCH").
# Holding it while re-checking and inserting means two overlapping runs can never both decide
# that a (job_type, target_id) has no active job. SAN's workers never take it.
WRITE_LOCK_KEY = 0x53414E4241544348


# -- named statements ----------------------------------------------------------------------
SET_TIMEOUTS = text(
    "SELECT set_config('lock_timeout', :lock, true), "
    "set_config('statement_timeout', :statement, true)"
)
SET_LOCK_TIMEOUT = text("SELECT set_config('lock_timeout', :lock, true)")
TAKE_WRITE_LOCK = text("SELECT pg_advisory_xact_lock(:key)")
NOW = text("SELECT now()")
# A new session's values (reset_val: the role's and the database's defaults, not this
# transaction's).
SESSION_DEFAULTS = text(
    "SELECT name, reset_val FROM pg_settings WHERE lower(name) = ANY(:names) ORDER BY name"
)


# -- connecting --------------------------------------------------------------------------------
def normalise_url(url: URL) -> URL:
    """postgres:// and postgresql:// (no driver, or psycopg2's) use psycopg 3."""
    driver = url.drivername.partition("+")[2]  # "": none named (postgres://, postgresql://)
    return url.set(
        drivername="postgresql+" + (driver if driver not in ("", "psycopg2") else "psycopg")
    )


# A server that vanished without closing the connection (a host lost, a partition) is seen by
# the kernel within about a minute instead of the default two hours: a statement waiting on it
# fails, and its run retries or ends.
TCP_KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}


def create_engine(url: URL) -> Engine:
    """An engine whose every transaction starts with BEGIN_SETTINGS, and lz4 compression of
    its WAL where the role may (the `begin` event: jobs, sensors, `doctor` and the CLI alike).
    application_name: operators see batch_pipeline's sessions in pg_stat_activity.

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
            **TCP_KEEPALIVES,
        },
    )
    begin_statement = [BEGIN_SETTINGS]  # what each transaction starts with, decided below

    @event.listens_for(engine, "first_connect")
    def _first_connect(dbapi_connection, _record):
        # the role and the server are the same for every connection of the engine (a pooler's
        # too), so one look decides for all of them, once
        with dbapi_connection.cursor() as cursor:
            if may_compress_wal(cursor):
                begin_statement[0] = BEGIN_SETTINGS + ", " + _set_config_calls(COMPRESS_OUR_WAL)
        dbapi_connection.rollback()

    @event.listens_for(engine, "begin")
    def _begin(conn):
        conn.exec_driver_sql(begin_statement[0])

    return engine


# Full-page images are most of the WAL a run writes (the first change to a page after each
# checkpoint logs the whole page: 92 % of 304 MB for 97,000 targets at scale 1), and the app's
# commits wait to flush it; lz4 shrinks it 2.3x for a little of our backend's CPU. Only a
# superuser or a role granted it (PostgreSQL 15: `GRANT SET ON PARAMETER wal_compression`,
# deploy/postgres/grants.sql) may set it, so it is set where the role may and the server has
# it off; anywhere else the writes are the same, only their WAL larger.
COMPRESS_OUR_WAL = {"wal_compression": "lz4"}
WAL_COMPRESSION = "SELECT setting, enumvals FROM pg_settings WHERE name = 'wal_compression'"
MAY_SET_WAL_COMPRESSION = "SELECT has_parameter_privilege('wal_compression', 'SET')"


def may_compress_wal(cursor) -> bool:
    """Whether this role may turn on lz4 compression of its WAL and it is not on already:
    the server has it off, knows lz4 (PostgreSQL 15 built with it) and lets the role set it."""
    cursor.execute(WAL_COMPRESSION)
    setting, choices = cursor.fetchone()
    if setting != "off" or COMPRESS_OUR_WAL["wal_compression"] not in (choices or []):
        return False
    cursor.execute(MAY_SET_WAL_COMPRESSION)  # lz4 came with PostgreSQL 15, and so did this
    return bool(cursor.fetchone()[0])


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


def _set_config_calls(settings: Mapping[str, str]) -> str:
    return ", ".join(f"set_config('{name}', '{value}', true)" for name, value in settings.items())


def _set_locally(settings: Mapping[str, str]) -> str:
    """One statement setting each of `settings` for the current transaction only (set_config
    with is_local: a pooler in transaction mode, PgBouncer, is fine)."""
    return "SELECT " + _set_config_calls(settings)


# No parallel workers for batch_pipeline's queries: they take the cores the app's own
# transactions need (on a 2-core database the app's p99 during a recovery run halved without
# them; docs/benchmarks.md, "The app's latency while batch_pipeline heals"). A detection
# without the recommended indexes runs longer for it; with them it reads only what it needs.
LEAVE_CORES_TO_THE_APP = {"max_parallel_workers_per_gather": "0"}
# The pages our writes dirty and the backend writes out (a run dirties more than shared_buffers
# holds) are handed to the disk every 256 kB, not left in the page cache for the kernel to
# write back in one burst up to 30 s later, behind which the app's commits wait for their WAL
# flush (PostgreSQL's default for backends is 0, never; docs/benchmarks.md, "The app's latency
# while batch_pipeline heals").
WRITE_BACK_AS_WE_GO = {"backend_flush_after": "256kB"}

_DEFAULT_LIMITS = WriteLimits()
# What every transaction of the code starts with (the benchmark's probe times statements under it).
BEGIN_SETTINGS = _set_locally(
    {
        **READ_SETTINGS,
        **LEAVE_CORES_TO_THE_APP,
        **WRITE_BACK_AS_WE_GO,
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
            SET_TIMEOUTS,
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
        SESSION_DEFAULTS,
        {"names": names},
    ).all()
    return {name: value for name, value in rows}


def database_now(conn: Connection) -> datetime:
    """The database's clock (the transaction's start), aware."""
    return conn.execute(NOW).scalar_one()


def take_write_lock(conn: Connection, limits: WriteLimits) -> None:
    """Wait for batch_pipeline's other writers (another area, a TIL day of a backfill) as long
    as one of their statements may run, not `lock_timeout`: that bound is for the app's locks
    (a migration holding a table), and a queue of our own busy batches is no such thing. Then
    `lock_timeout` again for every table lock of the batch."""
    conn.execute(
        SET_LOCK_TIMEOUT,
        {"lock": str(int(limits.statement_timeout_ms))},
    )
    conn.execute(TAKE_WRITE_LOCK, {"key": WRITE_LOCK_KEY})
    conn.execute(
        SET_LOCK_TIMEOUT,
        {"lock": str(int(limits.lock_timeout_ms))},
    )
