"""`python -m batch_pipeline doctor`: ready only when nothing is wrong, and says how to fix it."""

import os
import subprocess
from pathlib import Path

from sqlalchemy import text

from batch_pipeline.doctor import run_doctor
from batch_pipeline.san.schema import app_guarantee_statement, create_recommended_indexes
from batch_pipeline.san.tables import CARD_ANALYSIS, PENDING, PROCESSING
from batch_pipeline_tests.conftest import (
    ODD_SESSION_DEFAULTS,
    pg_admin_url,
    with_session_defaults,
)

GRANTS_SQL = Path(__file__).resolve().parents[1] / "deploy" / "postgres" / "grants.sql"


def with_app_guarantee(db):
    with db.engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(
            text(app_guarantee_statement("postgresql"))
        )


def doctor(url, monkeypatch, **env):
    for name in ("SAN_JOB_DISPATCHER", "SAN_TIMEZONE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    lines = []
    return run_doctor(url, out=lines.append), "\n".join(lines)


def test_a_ready_database(pg_db, monkeypatch):
    create_recommended_indexes(pg_db.engine)
    with_app_guarantee(pg_db)
    code, report = doctor(pg_db.url, monkeypatch)
    assert code == 0 and report.endswith("ready")
    assert "clock skew database - this server" in report and "dispatcher pg_notify" in report


def test_missing_indexes_are_a_warning_with_their_cost_and_fix_printed(pg_db, monkeypatch):
    with_app_guarantee(pg_db)
    code, report = doctor(pg_db.url, monkeypatch)
    assert code == 0 and report.endswith("ready, with 1 warning(s)")
    assert "detection then reads whole tables" in report and "the fast lane stays off" in report
    assert (
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_san_jobs_target ON jobs (target_id, job_type) "
        "INCLUDE (status)" in report
    )


def test_an_index_an_earlier_release_recommended_is_pointed_out_with_its_drop(pg_db, monkeypatch):
    create_recommended_indexes(pg_db.engine)
    with_app_guarantee(pg_db)
    with pg_db.engine.begin() as conn:
        conn.execute(
            text(
                "CREATE INDEX ix_san_scraps_unrefined ON scraps (created_at) WHERE refined_content "
                "IS NULL"
            )
        )
    code, report = doctor(pg_db.url, monkeypatch)
    # it costs the app's writes, nothing breaks
    assert code == 0 and report.endswith("ready, with 1 warning(s)")
    assert (
        "superseded indexes" in report
        and "DROP INDEX CONCURRENTLY IF EXISTS ix_san_scraps_unrefined;" in report
    )


def test_the_app_side_guarantee_is_offered_until_a_unique_index_gives_it(pg_db, monkeypatch):
    create_recommended_indexes(pg_db.engine)
    user_scrap = pg_db.scrap(pg_db.user())
    pg_db.job(CARD_ANALYSIS, user_scrap, PENDING)
    # the race the index prevents, already happened
    pg_db.job(CARD_ANALYSIS, user_scrap, PROCESSING)
    code, report = doctor(pg_db.url, monkeypatch)
    assert code == 0 and report.endswith("ready, with 1 warning(s)")
    assert "no unique index guarantees one active job per (job_type, target_id)" in report
    assert (
        "1 target(s) have two active jobs now" in report
        and "Close the doubled active jobs first" in report
    )
    assert app_guarantee_statement("postgresql") in report
    with pg_db.engine.begin() as conn:  # closed; then the app builds it under a name of its own
        conn.execute(text("UPDATE jobs SET status = 'FAILED' WHERE status = 'PROCESSING'"))
        conn.execute(
            text(
                "CREATE UNIQUE INDEX ux_app_one_active_job ON jobs (job_type, target_id) "
                "WHERE status IN ('PENDING', 'PROCESSING')"
            )
        )
    code, report = doctor(pg_db.url, monkeypatch)
    assert code == 0 and report.endswith("ready")
    assert "guaranteed by the unique index ux_app_one_active_job" in report


def test_a_missing_column_an_unknown_dispatcher_and_a_bad_zone(pg_db, monkeypatch):
    create_recommended_indexes(pg_db.engine)
    with pg_db.engine.begin() as conn:
        conn.execute(text("ALTER TABLE knowledge_cards DROP COLUMN user_id"))
    code, report = doctor(pg_db.url, monkeypatch, SAN_TIMEZONE="Nowhere/Land")
    assert code == 1
    assert "column 'knowledge_cards.user_id' is missing" in report
    assert "SAN_TIMEZONE='Nowhere/Land' is not a known IANA time zone" in report


def test_unknown_dispatcher_and_unreachable_server(san_db, monkeypatch):
    code, report = doctor(san_db.url, monkeypatch, SAN_JOB_DISPATCHER="smoke-signals")
    assert code == 1 and "SAN_JOB_DISPATCHER='smoke-signals' is not a dispatcher" in report
    code, report = doctor("postgresql+psycopg://postgres@127.0.0.1:1/san", monkeypatch)
    assert code == 1 and "cannot connect to the SAN database" in report
    assert "fix: start the server, or fix the host and port" in report


def test_each_connection_failure_gets_its_own_fix(monkeypatch):
    code, report = doctor(
        "postgresql+psycopg://postgres@127.0.0.1:5432/no_such_database_here", monkeypatch
    )
    assert code == 1 and "fix: fix the database name" in report
    code, report = doctor("mysql://root@127.0.0.1/san", monkeypatch)
    assert code == 1 and "fix: batch_pipeline runs on PostgreSQL" in report


def test_a_locked_table_is_reported_not_waited_on(pg_db, monkeypatch):
    import time

    migration = pg_db.engine.connect()
    transaction = migration.begin()
    migration.execute(text("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE"))
    try:
        started = time.monotonic()
        code, report = doctor(pg_db.url, monkeypatch)
        waited = time.monotonic() - started
    finally:
        transaction.rollback()
        migration.close()
    assert code == 1 and waited < 30  # the default 5 s lock_timeout, not forever
    assert "lock timeout" in report


def test_a_timestamp_without_time_zone_is_refused_by_name(pg_db, monkeypatch):
    with pg_db.engine.begin() as conn:
        conn.execute(
            text("ALTER TABLE jobs ALTER COLUMN created_at TYPE timestamp without time zone")
        )
    code, report = doctor(pg_db.url, monkeypatch)
    assert code == 1
    assert (
        "column 'jobs.created_at' is TIMESTAMP WITHOUT TIME ZONE; batch_pipeline needs TIMESTAMPTZ"
        in report
    )


def test_a_read_only_role_is_not_ready_names_the_grants_and_the_shipped_grants_fix_it(
    pg_db, monkeypatch
):
    from sqlalchemy.engine import make_url

    create_recommended_indexes(pg_db.engine)
    schema = make_url(pg_db.url).query["options"].split("=")[1]
    with pg_db.role("bp_reader", "SELECT") as (role, reader_url):
        code, report = doctor(reader_url, monkeypatch)
        assert code == 1 and report.endswith("not ready")
        assert (
            f"role {role} lacks: INSERT on jobs, UPDATE on jobs, INSERT on daily_summaries, USAGE "
            "on sequence" in report
        )
        assert "batch_pipeline's writes do not compress their WAL" in report
        # the shipped grants, applied as the docs say, make the same role ready
        subprocess.run(
            [
                "psql",
                make_url(pg_admin_url())
                .set(drivername="postgresql")
                .render_as_string(hide_password=False),
                "-q",
                "-v",
                f"role={role}",
                "-f",
                str(GRANTS_SQL),
            ],
            check=True,
            env={**os.environ, "PGOPTIONS": f"-c search_path={schema}"},
        )
        code, report = doctor(reader_url, monkeypatch)
        assert "this role may read the SAN tables, write jobs and daily_summaries" in report
        # run by a superuser, the grants also let the role compress its WAL
        assert "batch_pipeline's writes compress their WAL (lz4)" in report
        assert code == 0, report


def test_odd_session_defaults_are_a_note_not_a_traceback_and_a_read_only_role_is_named(
    pg_db, monkeypatch
):
    """A role whose sessions start with DateStyle 'SQL, DMY': doctor completes every check
    (the clock skew included), notes the setting, and stays ready."""
    create_recommended_indexes(pg_db.engine)
    with_app_guarantee(pg_db)
    odd = with_session_defaults(pg_db.url, ODD_SESSION_DEFAULTS)
    code, report = doctor(odd, monkeypatch)
    assert code == 0 and report.endswith("ready"), report
    assert "DateStyle = 'SQL, DMY'" in report and "they change nothing it reads" in report
    assert "clock skew database - this server" in report and "Traceback" not in report
    read_only = with_session_defaults(pg_db.url, "-cdefault_transaction_read_only=on")
    code, report = doctor(read_only, monkeypatch)
    assert code == 1 and "read-only (default_transaction_read_only = on)" in report


def test_a_check_that_cannot_complete_is_a_finding_naming_it(pg_db, monkeypatch):
    from batch_pipeline import doctor as doctor_module

    def broken(conn):  # no docstring: the finding's title is the check's, not its docstring's
        raise RuntimeError("the clock broke")

    monkeypatch.setattr(
        doctor_module,
        "CONNECTED_CHECKS",
        tuple(
            (title, broken if check is doctor_module.clock_finding else check)
            for title, check in doctor_module.CONNECTED_CHECKS
        ),
    )
    code, report = doctor(pg_db.url, monkeypatch)
    assert code == 1
    assert (
        "BAD  The clock skew between this server and the database: RuntimeError: the clock broke"
        in report
    )
