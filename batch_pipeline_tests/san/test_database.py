"""The SAN database connection: bad input names the problem (a wrong URL, an unreachable server,
a missing table or column), and every transaction bounds its waits."""

from datetime import UTC
from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy import select, text
from sqlalchemy.engine import make_url

from batch_pipeline.recovery.orphan_scraps import ORPHAN_SCRAPS
from batch_pipeline.recovery.targets import detect_targets
from batch_pipeline.san.database import (
    SanConnectionError,
    check_connection,
    create_san_engine,
    database_now,
    read_transaction,
    write_transaction,
)
from batch_pipeline.san.limits import WriteLimits
from batch_pipeline.san.schema import SanSchemaError, verify_schema
from batch_pipeline.san.tables import scraps
from batch_pipeline_tests.conftest import APP_DDL, PgSchema

SHARED_DDL = Path(__file__).resolve().parents[3] / "shared" / "san_app_schema.sql"


def test_malformed_url_is_named():
    with pytest.raises(SanConnectionError, match="not a valid SQLAlchemy URL"):
        create_san_engine("not a url")


def test_unsupported_database_is_named():
    with pytest.raises(SanConnectionError, match="names the 'mysql' database"):
        create_san_engine("mysql://root@127.0.0.1/san")


def test_a_postgres_url_as_hosted_databases_hand_it_out_connects_with_psycopg_3(pg_db):
    hosted = pg_db.url.replace("postgresql+psycopg://", "postgres://", 1)
    engine = create_san_engine(hosted)
    assert engine.url.drivername == "postgresql+psycopg"
    check_connection(engine)
    with read_transaction(engine) as conn:
        verify_schema(conn)
    engine.dispose()


def test_unreachable_server_is_named_without_the_password():
    engine = create_san_engine("postgresql+psycopg://san:secret@127.0.0.1:1/san")
    with pytest.raises(SanConnectionError) as error:
        check_connection(engine)
    assert (
        "cannot connect to the SAN database at postgresql+psycopg://san:***@127.0.0.1:1/san"
        in str(error.value)
    )
    assert "secret" not in str(error.value)


def test_the_app_ddl_and_our_schema_both_verify(san_db):
    with san_db.engine.connect() as conn:
        verify_schema(conn)


def test_missing_table_and_column_are_named(pg_db):
    with pg_db.engine.begin() as conn:
        conn.execute(text("ALTER TABLE jobs DROP COLUMN retry_of_job_id"))
        conn.execute(text("DROP TABLE daily_summaries"))
    with pg_db.engine.connect() as conn, pytest.raises(SanSchemaError) as error:
        verify_schema(conn)
    assert "column 'jobs.retry_of_job_id' is missing" in str(error.value)
    assert "table 'daily_summaries' is missing" in str(error.value)


def test_batch_pipeline_schema_on_postgres_verifies():
    schema = PgSchema(app_ddl=False)
    try:
        with schema.engine.connect() as conn:
            verify_schema(conn)
    finally:
        schema.drop()


@pytest.mark.skipif(not SHARED_DDL.exists(), reason="no ../shared beside this checkout")
def test_bundled_app_ddl_is_the_shared_one():
    assert APP_DDL.read_text() == SHARED_DDL.read_text()


def session_default(engine, name: str) -> str:
    """A setting as the session has it outside batch_pipeline's transactions (the driver's own
    connection, no SQLAlchemy transaction and so no `begin` event)."""
    raw = engine.raw_connection()
    try:
        with raw.driver_connection.cursor() as cursor:
            value = cursor.execute(f"SHOW {name}").fetchone()[0]
        raw.driver_connection.rollback()
        return value
    finally:
        raw.close()


def test_every_transaction_bounds_its_waits_turns_jit_off_and_reads_in_utc_for_itself_only(pg_db):
    limits = WriteLimits(lock_timeout_ms=1234, statement_timeout_ms=56789)
    names = ("lock_timeout", "statement_timeout", "jit", "timezone", "datestyle")
    for transaction in (read_transaction, write_transaction):
        with transaction(pg_db.engine, limits) as conn:
            settings = [conn.execute(text(f"SHOW {name}")).scalar() for name in names]
            assert settings == ["1234ms", "56789ms", "off", "UTC", "ISO, MDY"]
    # any other transaction (a plain connect) has the default bounds and the read settings too
    with pg_db.engine.connect() as conn:
        settings = [conn.execute(text(f"SHOW {name}")).scalar() for name in names]
        assert settings == ["5s", "2min", "off", "UTC", "ISO, MDY"]
    # transaction-local: the pooled session itself keeps its defaults
    assert session_default(pg_db.engine, "lock_timeout") == "0"


def test_a_libpq_password_parameter_is_redacted_like_the_password_itself():
    from batch_pipeline.san.database import redacted

    shown = redacted(
        "postgresql+psycopg://san@db:5432/san?password=s3cr3t&sslmode=require&sslpassword=k3y"
    )
    assert "s3cr3t" not in shown and "k3y" not in shown
    assert "sslmode=require" in shown and "password=***" in shown
    assert redacted("redis://:r3d1s@cache:6379/0") == "redis://:***@cache:6379/0"


def test_a_writer_waits_for_another_batch_pipeline_batch_past_lock_timeout_but_not_for_an_app_lock(
    pg_db,
):
    """Several TIL days of a backfill and a recovery run take turns at the write lock: a batch
    longer than lock_timeout must not fail the others. A table the app (a migration) holds
    still fails within lock_timeout."""
    import threading
    import time

    from sqlalchemy.exc import OperationalError

    limits = WriteLimits(lock_timeout_ms=200, statement_timeout_ms=10_000)
    holding, release = threading.Event(), threading.Event()

    def slow_batch():
        with write_transaction(pg_db.engine, limits):
            holding.set()
            release.wait(10)

    other = threading.Thread(target=slow_batch)
    other.start()
    try:
        holding.wait(10)
        threading.Timer(1.0, release.set).start()  # a batch of 1 s, five times the lock_timeout
        started = time.monotonic()
        with write_transaction(pg_db.engine, limits) as conn:
            waited = time.monotonic() - started
            assert (
                conn.execute(text("SELECT current_setting('lock_timeout')")).scalar_one() == "200ms"
            )
    finally:
        release.set()
        other.join()
    assert waited >= 0.8  # it waited its turn instead of failing after 200 ms
    app = pg_db.engine.connect()
    app_transaction = app.begin()
    app.execute(text("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE"))  # a migration
    try:
        with pytest.raises(OperationalError, match="lock timeout"):
            with write_transaction(pg_db.engine, limits) as conn:
                conn.execute(text("SELECT count(*) FROM jobs"))
    finally:
        app_transaction.rollback()
        app.close()


def test_timestamps_come_back_in_utc_whatever_the_sessions_time_zone(pg_db):
    """A server (or role) whose default zone is Asia/Seoul: every transaction reads timestamps
    as datetime.timezone.utc (which pandas converts in C, not value by value through a
    ZoneInfo), and a detection frame holds the very instants stored."""
    url = make_url(pg_db.url)
    seoul = create_san_engine(
        url.update_query_dict({"options": f"{url.query['options']} -ctimezone=Asia/Seoul"})
    )
    saved = pg_db.ago(hours=3)
    scrap = pg_db.scrap(pg_db.user(), created_at=saved)
    try:
        assert session_default(seoul, "timezone") == "Asia/Seoul"
        with read_transaction(seoul) as conn:
            stored = conn.execute(
                select(scraps.c.created_at).where(scraps.c.id == scrap)
            ).scalar_one()
            frame = detect_targets(conn, ORPHAN_SCRAPS, now=database_now(conn))
        assert stored.tzinfo is UTC and stored == saved
        assert frame.loc[frame["scrap_id"] == scrap, "created_at"].tolist() == [pd.Timestamp(saved)]
    finally:
        seoul.dispose()
