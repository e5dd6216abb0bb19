"""PostgreSQL sessions: the settings every transaction reads values with, whatever the role's
defaults; the write lock that serialises batch_pipeline's writers; no parallel workers, early
writeback."""

import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import OperationalError

from batch_pipeline.recovery.orphan_scraps import ORPHAN_SCRAPS
from batch_pipeline.recovery.targets import detect_targets
from batch_pipeline.san.database import create_san_engine, database_now, read_transaction
from batch_pipeline.san.dialects import postgresql
from batch_pipeline.san.dialects.postgresql.session import TCP_KEEPALIVES
from batch_pipeline.san.limits import WriteLimits
from batch_pipeline.san.tables import scraps
from batch_pipeline_tests.conftest import ODD_SESSION_DEFAULTS, with_session_defaults


def test_a_non_iso_datestyle_default_changes_nothing_batch_pipeline_reads(pg_db):
    """A role or database with DateStyle 'SQL, DMY' (psycopg then refuses every timestamp it
    reads: "can't parse timestamptz"): every transaction reads in ISO, detection included."""
    saved = pg_db.ago(hours=3)
    scrap = pg_db.scrap(pg_db.user(), created_at=saved)
    engine = create_san_engine(with_session_defaults(pg_db.url, ODD_SESSION_DEFAULTS))
    try:
        with engine.connect() as conn:  # any transaction, not only read/write_transaction
            stored = conn.execute(
                select(scraps.c.created_at).where(scraps.c.id == scrap)
            ).scalar_one()
        assert stored == saved
        with read_transaction(engine) as conn:
            frame = detect_targets(conn, ORPHAN_SCRAPS, now=database_now(conn))
            defaults = postgresql.session_defaults(conn)
        assert frame["scrap_id"].tolist() == [scrap]
        assert database_now(engine).tzinfo is not None
        # what the role's sessions start with is still reported as it is
        assert defaults["DateStyle"] == "SQL, DMY" and defaults["IntervalStyle"] == "sql_standard"
    finally:
        engine.dispose()


def test_the_write_lock_serialises_batch_pipelines_writers_only(pg_db):
    """A second writer of batch_pipeline waits for the first one's lock, and gives up after its
    bound; one of SAN's own transactions, which never takes the lock, does not wait at all."""
    with pg_db.engine.begin() as first:
        postgresql.take_write_lock(first, WriteLimits())
        with pg_db.engine.connect() as second:
            with pytest.raises(OperationalError, match="timeout"):
                with second.begin():
                    # its wait for the lock is bounded by its statement timeout
                    postgresql.take_write_lock(
                        second, WriteLimits(lock_timeout_ms=100, statement_timeout_ms=300)
                    )
            with second.begin():  # the app's write: no advisory lock, no wait
                assert second.execute(text("SELECT pg_try_advisory_xact_lock(1)")).scalar_one()
    with pg_db.engine.connect() as second, second.begin():  # released with the first's commit
        postgresql.take_write_lock(
            second, WriteLimits(lock_timeout_ms=100, statement_timeout_ms=300)
        )


@pytest.mark.parametrize(
    "name, server_default, ours",
    [
        # parallel workers would take the app's cores
        ("max_parallel_workers_per_gather", "4", "0"),
        # pages our batches write out go to the disk as we go, not in a burst later (in 8 kB)
        ("backend_flush_after", "0", "32"),
    ],
)
def test_every_transaction_leaves_the_app_its_cores_and_its_disk(pg_db, name, server_default, ours):
    """Whatever the role's or the server's default, every transaction of batch_pipeline runs
    without parallel workers and writes back what it dirties as it goes (docs/benchmarks.md,
    "The app's latency while batch_pipeline heals")."""
    engine = create_san_engine(with_session_defaults(pg_db.url, f"-c{name}={server_default}"))
    try:
        with engine.connect() as conn:
            default = conn.execute(
                text("SELECT reset_val FROM pg_settings WHERE name = :name"), {"name": name}
            ).scalar_one()
            inside = conn.execute(
                text("SELECT setting FROM pg_settings WHERE name = :name"), {"name": name}
            ).scalar_one()
        assert (default, inside) == (server_default, ours)
    finally:
        engine.dispose()


def wal_compression_inside(url: str) -> str:
    engine = create_san_engine(url)
    try:
        with engine.begin() as conn:
            return conn.execute(text("SHOW wal_compression")).scalar_one()
    finally:
        engine.dispose()


def test_a_role_that_may_compresses_its_wal_and_one_that_may_not_writes_as_before(pg_db):
    """lz4 for the full-page images of batch_pipeline's writes where the role may set it (a
    superuser, or `GRANT SET ON PARAMETER wal_compression`, as deploy/postgres/grants.sql gives
    when a superuser runs it); a role that may not writes with the server's setting, and a
    server that compresses already keeps its own choice."""
    assert wal_compression_inside(pg_db.url) == "lz4"  # the tests' role is a superuser
    assert wal_compression_inside(with_session_defaults(pg_db.url, "-cwal_compression=zstd")) == (
        "zstd"
    )
    with pg_db.role("bp_writer", "SELECT, INSERT, UPDATE") as (role, writer):
        assert wal_compression_inside(writer) == "off"
        with pg_db.engine.begin() as conn:
            conn.execute(text(f"GRANT SET ON PARAMETER wal_compression TO {role}"))
        assert wal_compression_inside(writer) == "lz4"


def test_each_connection_probes_a_silent_server_with_tcp_keepalives(pg_db):
    with pg_db.engine.connect() as conn:
        parameters = conn.connection.dbapi_connection.info.get_parameters()
    assert {name: parameters.get(name) for name in TCP_KEEPALIVES} == {
        name: str(value) for name, value in TCP_KEEPALIVES.items()
    }
