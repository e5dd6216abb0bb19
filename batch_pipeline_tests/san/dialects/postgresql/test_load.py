"""The throttle's signals, read from the real PostgreSQL: a commit's latency, the app's active
sessions (not ours), an app session waiting for a lock batch_pipeline holds."""

import threading
import uuid

import psycopg
import pytest
from sqlalchemy import create_engine, make_url, text

from batch_pipeline.san.database import create_san_engine, write_transaction
from batch_pipeline.san.dialects.postgresql.load import read_load
from batch_pipeline.san.tables import CARD_ANALYSIS, PENDING
from batch_pipeline.san.throttle import APP_AT_WORK_WITHIN
from batch_pipeline_tests.conftest import pg_admin_url


def app_engine(pg_db):
    """A connection as SAN's app makes it: another application_name than batch_pipeline's."""
    return create_engine(
        pg_db.engine.url.render_as_string(hide_password=False),
        connect_args={"application_name": "san-app"},
    )


def test_an_idle_database_reads_a_fast_commit_and_no_app_at_work(pg_db):
    reading = read_load(pg_db.engine)
    assert 0 < reading.probe_seconds < 5
    assert reading.blocked_by_us == 0 and reading.cores >= 1
    assert reading.replica_lag_seconds is None  # no replicas here


def test_an_app_session_at_work_and_one_blocked_by_ours_are_counted(pg_db):
    job = pg_db.job(CARD_ANALYSIS, 1, PENDING)
    app = app_engine(pg_db)
    busy_started, blocked_started = threading.Event(), threading.Event()

    def app_at_work():
        with app.connect() as conn:
            busy_started.set()
            conn.execute(text("SELECT pg_sleep(3)"))

    def app_blocked():
        with app.begin() as conn:
            blocked_started.set()
            conn.execute(text("UPDATE jobs SET updated_at = now() WHERE id = :id"), {"id": job})

    with write_transaction(pg_db.engine) as ours:  # batch_pipeline holds the job's row
        ours.execute(text("UPDATE jobs SET updated_at = now() WHERE id = :id"), {"id": job})
        threads = [threading.Thread(target=app_at_work), threading.Thread(target=app_blocked)]
        for thread in threads:
            thread.start()
        busy_started.wait(10), blocked_started.wait(10)
        reading = None
        for _ in range(50):
            reading = read_load(pg_db.engine)
            if reading.blocked_by_us and reading.active_app_sessions >= 2:
                break
            threading.Event().wait(0.1)
        assert reading.blocked_by_us == 1
        assert reading.active_app_sessions >= 2  # the sleeper and the blocked one
    for thread in threads:
        thread.join(30)
    app.dispose()


@pytest.fixture
def own_database():
    """A database of this test's own: the at-work count is per database, and the shared test
    database holds other tests' sessions. Yields (batch_pipeline's engine, the app's)."""
    name = f"bp_load_{uuid.uuid4().hex[:10]}"
    admin = psycopg.connect(
        make_url(pg_admin_url()).set(drivername="postgresql").render_as_string(hide_password=False),
        autocommit=True,
    )
    admin.execute(f"CREATE DATABASE {name}")
    url = make_url(pg_admin_url()).set(drivername="postgresql+psycopg", database=name)
    ours = create_san_engine(url.render_as_string(hide_password=False))
    app = create_engine(url, connect_args={"application_name": "san-app"})
    try:
        yield ours, app
    finally:
        ours.dispose(), app.dispose()
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()


def test_an_app_between_two_short_transactions_is_at_work_until_it_has_been_idle_a_while(
    own_database,
):
    ours, app = own_database
    with app.connect() as conn:  # idle, connected: as a pool's connection waits
        conn.execute(text("SELECT 1"))
        just_now = read_load(ours)
        threading.Event().wait(APP_AT_WORK_WITHIN + 0.5)
        later = read_load(ours)
    assert just_now.active_app_sessions == 0  # nothing running at the instant of the reading
    assert just_now.app_sessions_at_work == 1
    assert later.app_sessions_at_work == 0


def test_batch_pipelines_own_sessions_are_never_the_app_at_work(own_database):
    ours, _ = own_database
    with ours.connect() as conn:
        conn.execute(text("SELECT 1"))
        reading = read_load(ours)
    assert reading.app_sessions_at_work == 0


def test_app_sessions_a_role_without_pg_read_all_stats_cannot_see_are_counted_unseen(
    own_database,
):
    """Without the grant the app's sessions show no state: counted unseen, so the throttle
    still judges the probes (san/throttle.py); with it they are seen, and none is unseen."""
    ours, app = own_database
    role = f"bp_plain_{uuid.uuid4().hex[:8]}"
    with ours.connect() as conn:
        conn.execute(text(f"CREATE ROLE {role} LOGIN"))
        conn.commit()
    plain = create_san_engine(ours.url.set(username=role).render_as_string(hide_password=False))
    try:
        with app.connect() as conn:
            conn.execute(text("SELECT 1"))
            unseen, seen = read_load(plain), read_load(ours)
    finally:
        plain.dispose()
        with ours.connect() as conn:
            conn.execute(text(f"DROP ROLE {role}"))
            conn.commit()
    assert (unseen.app_sessions_unseen, unseen.app_sessions_at_work) == (1, 0)
    assert (seen.app_sessions_unseen, seen.app_sessions_at_work) == (0, 1)
