"""Sandbox databases: the SAN app's own tables, and a guard that keeps the sandbox off real data."""

import pytest
from sqlalchemy import inspect, text

from batch_pipeline.san.tables import scraps
from batch_pipeline_tests.conftest import PgSchema
from san_sandbox.__main__ import main
from san_sandbox.app_schema import SAN_TABLES, NotASandbox, init_sandbox, require_sandbox


def columns(engine, table):
    with engine.connect() as conn:
        return {(c["name"], c["nullable"]) for c in inspect(conn).get_columns(table)}


def test_a_sandbox_has_the_same_tables_and_columns_as_the_app_ddl():
    app, sandbox = PgSchema(app_ddl=True), PgSchema(app_ddl=False)
    try:
        with sandbox.engine.begin() as conn:
            conn.execute(
                text("DROP TABLE daily_summaries, jobs, knowledge_cards, scraps, users CASCADE")
            )
        assert init_sandbox(sandbox.engine) is True
        for table in SAN_TABLES:
            assert columns(sandbox.engine, table.name) == columns(app.engine, table.name), (
                table.name
            )
    finally:
        app.drop()
        sandbox.drop()


def test_init_is_idempotent_and_adopts_an_empty_app_database(pg_db):
    assert init_sandbox(pg_db.engine) is True  # tables made by the app's DDL, no rows: fine
    assert init_sandbox(pg_db.engine) is False
    require_sandbox(pg_db.engine)


def test_init_refuses_a_database_holding_san_data_and_changes_nothing(san_db):
    san_db.scrap(san_db.user())
    with pytest.raises(NotASandbox, match="table users already holds rows"):
        init_sandbox(san_db.engine)
    with san_db.engine.connect() as conn:
        assert not inspect(conn).has_table("san_sandbox")
    with pytest.raises(NotASandbox, match="not a sandbox database"):
        require_sandbox(san_db.engine)


def test_the_cli_refuses_a_real_database_with_a_clear_error(san_db, capsys):
    san_db.scrap(san_db.user())
    for command in (["age", "--hours", "2"], ["load", "--scraps", "1"], ["work"], ["init"]):
        assert main([*command, "--database-url", san_db.url]) == 2, command
        assert "not a sandbox" in capsys.readouterr().err or command == ["init"]
    assert san_db.count(scraps) == 1


def test_the_cli_names_a_bad_fault_value(tmp_path, capsys):
    assert (
        main(["load", "--ai-fails", "1.5", "--database-url", f"sqlite:///{tmp_path}/x.sqlite"]) == 2
    )
    assert "ai_fails" in capsys.readouterr().err


def test_once_real_users_arrive_every_entry_point_refuses_and_writes_nothing(pg_db):
    """`sandbox init` on an empty, freshly migrated production database, then real users
    arrive: the marker alone must not let the sandbox age, load, work or seed it."""
    from datetime import timedelta

    from batch_pipeline.san.dispatch import Dispatcher
    from batch_pipeline.san.tables import CARD_ANALYSIS, PENDING
    from batch_pipeline_tests.sandbox.conftest import ListedEvents
    from san_sandbox.app import save_scraps
    from san_sandbox.demo import seed_demo_state
    from san_sandbox.faults import Faults
    from san_sandbox.time_travel import age_database
    from san_sandbox.worker import ReferenceWorker

    def state():
        with pg_db.engine.connect() as conn:
            return conn.execute(
                text(
                    "SELECT (SELECT count(*) FROM users), (SELECT count(*) FROM scraps), "
                    "(SELECT max(created_at) FROM scraps), (SELECT status FROM jobs)"
                )
            ).one()

    assert init_sandbox(pg_db.engine) is True
    real = pg_db.user(nickname="Kim")  # the app's first real user
    scrap = pg_db.scrap(real, created_at=pg_db.ago(hours=1))
    job = pg_db.job(CARD_ANALYSIS, scrap, PENDING)
    before = state()
    for attempt in (
        lambda: age_database(pg_db.engine, timedelta(hours=2)),
        lambda: save_scraps(pg_db.engine, Dispatcher(), count=3, users=2, faults=Faults()),
        lambda: ReferenceWorker(pg_db.engine, ListedEvents([job])).drain(),
        lambda: seed_demo_state(pg_db.engine),
    ):
        with pytest.raises(
            NotASandbox, match=f"holds users the sandbox did not create \\(user {real}\\)"
        ):
            attempt()
    # not aged, not loaded, not worked, not seeded
    assert state() == before and before[3] == PENDING
    for command in (["age", "--hours", "2"], ["load", "--scraps", "1"], ["work"]):
        assert main([*command, "--database-url", pg_db.url]) == 2, command
