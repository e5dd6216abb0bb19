"""Through a real PgBouncer in transaction mode (Debian's package), with the app's own traffic
sharing its server connections: each transaction of ours may run on another server connection,
so nothing may outlive a transaction (psycopg's automatic prepared statements did: a run failed
at its sixth batch with `prepared statement "_pg3_0" does not exist`)."""

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from dagster import DagsterInstance
from sqlalchemy import text
from sqlalchemy.engine import make_url

from batch_pipeline.san.database import create_san_engine
from batch_pipeline.san.tables import CARD_ANALYSIS, FAILED, PENDING, TIL_GENERATION
from batch_pipeline_tests.conftest import SanDb, pg_admin_url
from batch_pipeline_tests.processes import pgbouncer, san_database_of_its_own
from batch_pipeline_tests.runs import at, latest_metadata, recent_start, run_recovery, run_til, tick


@contextmanager
def app_traffic(url: str) -> Iterator[list]:
    """SAN's app through the same pooler: short transactions, one after another, until the
    block ends (the list holds what it counted, and any error it met)."""
    done, seen = threading.Event(), []
    conninfo = make_url(url)

    def work():
        with psycopg.connect(
            host=conninfo.host, port=conninfo.port, user=conninfo.username, dbname="san"
        ) as conn:
            while not done.is_set():
                with conn.transaction():
                    conn.execute(
                        "SELECT count(*) FROM jobs WHERE status = 'PENDING'", prepare=False
                    )
                seen.append(1)
                done.wait(0.005)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        done.set()
        thread.join(10)


@pytest.fixture
def pooled_db(tmp_path) -> Iterator[SanDb]:
    """A SAN database (the app's DDL) that the pipeline reaches through PgBouncer while the
    app's traffic goes through it too; the test seeds and reads it directly."""
    server = pg_admin_url()
    with (
        san_database_of_its_own(server) as name,
        pgbouncer(server, name, tmp_path) as url,
        app_traffic(url) as traffic,
    ):
        direct = create_san_engine(make_url(server).set(database=name).render_as_string(False))
        try:
            yield SanDb(url, direct, "postgres")
        finally:
            direct.dispose()
    assert traffic, "the app's traffic never ran: the test proved nothing"


def test_a_recovery_run_of_many_batches_heals_everything_through_pgbouncer(pooled_db):
    db = pooled_db
    ghosts = [db.job(CARD_ANALYSIS, 1_000 + n, created_at=db.ago(hours=2)) for n in range(40)]
    user = db.user()
    orphans = [db.scrap(user, created_at=db.ago(hours=3), card=False) for _ in range(12)]

    result, instance = run_recovery(db, config={"batch_size": 4})

    assert result.success, [
        event.event_specific_data.error.message
        for event in result.all_events
        if event.event_type_value == "STEP_FAILURE"
    ]
    assert all(db.get_job(job).status == FAILED for job in ghosts)
    replacements = {job.target_id for job in db.jobs(status=PENDING, job_type=CARD_ANALYSIS)}
    assert replacements == {1_000 + n for n in range(40)} | set(orphans)
    ghost_audit = latest_metadata(instance, "ghost_job_recovery")
    assert (ghost_audit["enqueued"], ghost_audit["skipped_by_race"]) == (40, 0)
    assert latest_metadata(instance, "orphan_scrap_recovery")["enqueued"] == 12


def test_the_fast_lane_ticks_through_pgbouncer_again_and_again(pooled_db):
    db = pooled_db
    scrap = db.scrap(db.user(), created_at=db.ago(minutes=30))
    db.job(CARD_ANALYSIS, scrap, FAILED, created_at=db.ago(minutes=4), updated_at=db.ago(minutes=3))
    instance = DagsterInstance.ephemeral()
    cursor = recent_start(db)
    for _ in range(8):  # more than psycopg's 5 executions before it prepares a statement
        result, cursor = tick(db, instance, cursor)
        [request] = result.run_requests  # the failed scrap is due at every tick
        assert request.tags


def test_the_til_job_writes_its_day_through_pgbouncer(pooled_db):
    db = pooled_db
    users = [db.user() for _ in range(14)]
    for user in users:
        db.scrap(user, created_at=at("2026-11-28"), card=True)

    result, _instance = run_til(db, "2026-11-28", config={"batch_size": 2})

    assert result.success
    assert len(db.summaries()) == 14
    assert len(db.jobs(job_type=TIL_GENERATION, status=PENDING)) == 14


def test_one_connection_runs_one_statement_in_many_transactions_through_pgbouncer(pooled_db):
    """The cause itself: more executions of one statement on one connection than psycopg's 5
    before it prepares, each transaction on whichever server connection PgBouncer hands out."""
    engine = create_san_engine(pooled_db.url)
    count = text("SELECT count(*) FROM jobs WHERE target_id = :target")
    try:
        with engine.connect() as conn:
            for target in range(8):
                with conn.begin():
                    assert conn.execute(count, {"target": target}).scalar_one() == 0
    finally:
        engine.dispose()
