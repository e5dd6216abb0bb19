"""`python -m batch_pipeline create-indexes`: checks first, says what it did, one line per error."""

from sqlalchemy import text

from batch_pipeline.__main__ import main
from batch_pipeline.san.indexes import RECOMMENDED_INDEXES
from batch_pipeline_tests.conftest import ODD_SESSION_DEFAULTS, with_session_defaults


def our_indexes(db) -> int:
    with db.engine.connect() as conn:
        return conn.execute(
            text(
                "SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema() AND indexname "
                "LIKE 'ix_san_%'"
            )
        ).scalar_one()


def test_create_indexes_says_what_it_created_and_then_that_everything_is_there(san_db, capsys):
    assert main(["create-indexes", "--database-url", san_db.url]) == 0
    first = capsys.readouterr().out
    assert f"created: {', '.join(index.name for index in RECOMMENDED_INDEXES)}" in first
    assert main(["create-indexes", "--database-url", san_db.url]) == 0
    again = capsys.readouterr().out
    assert "created: -" in again and "already there: ix_san_jobs_target" in again


def test_create_indexes_on_a_table_without_a_column_is_one_line_naming_it_and_creates_nothing(
    pg_db, capsys
):
    with pg_db.engine.begin() as conn:
        conn.execute(text("ALTER TABLE jobs DROP COLUMN updated_at"))
    assert main(["create-indexes", "--database-url", pg_db.url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "jobs.updated_at" in err and "no index was created" in err
    assert our_indexes(pg_db) == 0


def test_create_indexes_as_batch_pipelines_own_role_names_the_owner_and_builds_nothing(
    pg_db, capsys
):
    """docs/production.md: the role of step 1 (grants.sql's privileges) may not build indexes;
    step 2 runs as the tables' owner."""
    with pg_db.role("bp_batch", "SELECT, INSERT, UPDATE") as (_role, batch_url):
        assert main(["create-indexes", "--database-url", batch_url]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "run it as their owner" in err, err
        assert our_indexes(pg_db) == 0
    assert main(["create-indexes", "--database-url", pg_db.url]) == 0  # as the owner
    assert our_indexes(pg_db) == len(RECOMMENDED_INDEXES)


def test_create_indexes_under_a_short_role_statement_timeout_still_builds(pg_db, capsys):
    # enough jobs that an index build outlasts the session's timeout
    with pg_db.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO jobs (job_type, target_id, status) "
                "SELECT 'CARD_ANALYSIS', g, 'COMPLETED' FROM generate_series(1, 300000) g"
            )
        )
        conn.execute(text("ANALYZE jobs"))
    url = pg_db.url.replace(
        "options=-csearch_path", "options=-cstatement_timeout%3D50%20-csearch_path"
    )
    assert "statement_timeout" in url
    assert main(["create-indexes", "--database-url", url]) == 0, capsys.readouterr().err
    assert our_indexes(pg_db) == len(RECOMMENDED_INDEXES)


def test_create_schema_refuses_a_database_that_holds_some_san_tables(pg_db, capsys):
    with pg_db.engine.begin() as conn:  # a broken SAN database: jobs is gone
        conn.execute(text("DROP TABLE jobs CASCADE"))
    assert main(["create-schema", "--database-url", pg_db.url]) == 2
    err = capsys.readouterr().err
    assert (
        "refusing to create the SAN tables: this database already holds " in err
        and "jobs" not in err.split(".")[0]
    )
    with pg_db.engine.connect() as conn:
        assert conn.execute(text("SELECT to_regclass('jobs')")).scalar_one() is None
    assert main(["create-schema", "--add-missing-tables", "--database-url", pg_db.url]) == 0
    assert "created jobs;" in capsys.readouterr().out


def test_create_schema_makes_an_empty_database_a_san_schema(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'new.sqlite'}"
    assert main(["create-schema", "--database-url", url]) == 0
    created = capsys.readouterr().out.split(";")[0].removeprefix("created ").split(", ")
    assert sorted(created) == ["daily_summaries", "jobs", "knowledge_cards", "scraps", "users"]


def test_show_indexes_offers_the_app_side_guarantee_as_a_comment_create_indexes_leaves_it(
    pg_db, capsys
):
    from batch_pipeline.san.indexes import APP_ONE_ACTIVE_JOB
    from batch_pipeline.san.schema import app_guarantee_statement

    assert main(["show-indexes", "--database-url", pg_db.url]) == 0
    shown = capsys.readouterr().out
    # commented: piping it to psql builds nothing
    assert f"-- {app_guarantee_statement('postgresql')};" in shown
    assert "\nCREATE UNIQUE" not in shown
    assert main(["create-indexes", "--database-url", pg_db.url]) == 0
    with pg_db.engine.connect() as conn:
        assert (
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema() AND "
                    "indexname = :name"
                ),
                {"name": APP_ONE_ACTIVE_JOB.name},
            ).scalar_one()
            == 0
        )


def test_create_indexes_works_for_a_role_whose_sessions_read_dates_the_sql_dmy_way(pg_db, capsys):
    odd = with_session_defaults(pg_db.url, ODD_SESSION_DEFAULTS)
    assert main(["create-indexes", "--database-url", odd]) == 0
    assert "recommended indexes present" in capsys.readouterr().out
