"""The Dialect interface: both dialect modules provide every member with its signature, and one
shared suite runs against each (as River runs riverdrivertest against every driver), on a real
SQLite file and the real PostgreSQL."""

import inspect
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Column, DateTime, select, text
from sqlalchemy.sql import Executable

from batch_pipeline.san.dialects import DIALECTS, ColumnMismatch, dialect, named_rows
from batch_pipeline.san.dialects.interface import Dialect
from batch_pipeline.san.indexes import RECOMMENDED_INDEXES
from batch_pipeline.san.job_source import EnqueueRequest, JobSource
from batch_pipeline.san.limits import WriteLimits
from batch_pipeline.san.schema import create_recommended_indexes
from batch_pipeline.san.tables import CARD_ANALYSIS, daily_summaries, jobs, users

MEMBERS = {
    name: member
    for name, member in vars(Dialect).items()
    if not name.startswith("_") and callable(member)
}
CONSTANTS = [name for name in Dialect.__annotations__]


@pytest.mark.parametrize("name", sorted(DIALECTS))
def test_each_dialect_module_provides_every_member_of_the_interface(name):
    module = DIALECTS[name]
    for constant in CONSTANTS:
        assert hasattr(module, constant), f"{name} lacks {constant}"
    for member, declared in MEMBERS.items():
        provided = getattr(module, member, None)
        assert callable(provided), f"{name} lacks {member}()"
        expected = [p for p in inspect.signature(declared).parameters if p != "self"]
        assert list(inspect.signature(provided).parameters) == expected, f"{name}.{member}"


def test_the_interface_is_what_the_callers_use():
    # every function the dialect modules share is declared, so no caller depends on one module
    shared = {
        name
        for name, value in vars(DIALECTS["sqlite"]).items()
        if callable(value) and getattr(value, "__module__", "") == DIALECTS["sqlite"].__name__
    } & {
        name
        for name, value in vars(DIALECTS["postgresql"]).items()
        if callable(value) and getattr(value, "__module__", "") == DIALECTS["postgresql"].__name__
    }
    assert shared <= set(MEMBERS), shared - set(MEMBERS)


# -- the shared suite: the same behaviour from each dialect, on a real database ------------------
def test_database_now_is_the_databases_aware_clock(san_db):
    with san_db.engine.begin() as conn:
        now = dialect(conn).database_now(conn)
    assert now.tzinfo is not None
    assert abs((now - datetime.now(UTC)).total_seconds()) < 5


def test_id_in_selects_exactly_the_ids(san_db):
    user = san_db.user()
    a, b, c = (san_db.job(CARD_ANALYSIS, target, created_at=san_db.now) for target in (1, 2, 3))
    with san_db.engine.begin() as conn:
        found = conn.execute(select(jobs.c.id).where(dialect(conn).id_in(jobs.c.id, [a, c, 999])))
        assert sorted(found.scalars()) == [a, c]
    assert user


def test_minutes_since_counts_whole_minutes(san_db):
    job = san_db.job(CARD_ANALYSIS, 1, created_at=san_db.ago(minutes=120))
    with san_db.engine.begin() as conn:
        db_dialect = dialect(conn)
        minutes = conn.execute(
            select(db_dialect.minutes_since(san_db.now, jobs.c.created_at)).where(jobs.c.id == job)
        ).scalar_one()
    assert minutes == 120


def test_insert_rows_returns_the_new_rows_by_name_and_skips_rows_whose_reference_is_gone(san_db):
    user = san_db.user()
    with san_db.engine.begin() as conn:
        rows = dialect(conn).insert_rows(
            conn,
            daily_summaries,
            constants={"target_date": san_db.now.date(), "created_at": san_db.now},
            id_columns={"user_id": [user, 999_999, user]},
            returning=["id", "user_id"],
            referenced={"user_id": users.c.id},
        )
    assert [row["user_id"] for row in rows] == [user, user]
    assert all(isinstance(row["id"], int) for row in rows)


def test_plain_rows_and_named_rows_read_every_row_and_named_rows_checks_the_columns(san_db):
    ids = [san_db.job(CARD_ANALYSIS, target) for target in (1, 2)]
    query = select(jobs.c.id, jobs.c.target_id).order_by(jobs.c.id)
    with san_db.engine.begin() as conn:
        assert dialect(conn).plain_rows(conn.execute(query)) == [(ids[0], 1), (ids[1], 2)]
        assert named_rows(conn.execute(query), ("id", "target_id")) == [(ids[0], 1), (ids[1], 2)]
        with pytest.raises(ColumnMismatch, match=r"\('id', 'target_id'\).*\('target_id', 'id'\)"):
            named_rows(conn.execute(query), ("target_id", "id"))


def test_transaction_settings_and_the_write_lock_hold_inside_a_transaction(san_db):
    def setting(conn, name):  # PostgreSQL's; SQLite has none of these (its busy timeout bounds)
        return (
            conn.execute(text(f"SHOW {name}")).scalar_one() if san_db.kind == "postgres" else None
        )

    create_recommended_indexes(san_db.engine)
    with san_db.engine.begin() as conn:
        db_dialect = dialect(conn)
        limits = WriteLimits(lock_timeout_ms=1234, statement_timeout_ms=5678)
        db_dialect.transaction_settings(conn, limits)
        if san_db.kind == "postgres":
            assert (setting(conn, "lock_timeout"), setting(conn, "statement_timeout")) == (
                "1234ms",
                "5678ms",
            )
        db_dialect.take_write_lock(conn, WriteLimits(lock_timeout_ms=4321))
        if san_db.kind == "postgres":  # the lock taken, lock_timeout is the batch's again
            assert setting(conn, "lock_timeout") == "4321ms"
        db_dialect.avoid_full_scans(conn, ["ix_san_jobs_target"])
        if san_db.kind == "postgres":
            assert setting(conn, "enable_seqscan") == "off"
    with san_db.engine.begin() as conn:  # transaction-local: the next one starts afresh
        if san_db.kind == "postgres":
            assert setting(conn, "lock_timeout") == f"{WriteLimits().lock_timeout_ms // 1000}s"
            db_dialect.avoid_full_scans(conn, ["ix_that_does_not_exist"])
            assert setting(conn, "enable_seqscan") == "on"  # without its index: left alone


def test_the_index_ddl_builds_every_recommended_index_and_the_catalog_sees_it(san_db):
    db_dialect = dialect(san_db.engine)
    names = [index.name for index in RECOMMENDED_INDEXES]
    with san_db.engine.begin() as conn:
        assert db_dialect.missing_valid_indexes(conn, names) == names
    db_dialect.run_index_statements(
        san_db.engine, [db_dialect.create_index_statement(index) for index in RECOMMENDED_INDEXES]
    )
    with san_db.engine.begin() as conn:
        assert db_dialect.missing_valid_indexes(conn, names) == []
        assert db_dialect.invalid_indexes(conn, names) == []
    db_dialect.run_index_statements(san_db.engine, [db_dialect.drop_index_statement(names[0])])
    with san_db.engine.begin() as conn:
        assert db_dialect.missing_valid_indexes(conn, names) == names[:1]


def test_the_tables_size_grows_with_their_rows(san_db):
    db_dialect = dialect(san_db.engine)
    with san_db.engine.begin() as conn:
        empty = db_dialect.table_bytes(conn, ["jobs", "scraps"])
    with san_db.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO jobs (job_type, target_id, status, created_at, updated_at) "
                "SELECT 'CARD_ANALYSIS', 1, 'COMPLETED', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP "
                "FROM (WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < "
                "3000) SELECT i FROM n) AS numbers"
            )
        )
    with san_db.engine.begin() as conn:
        assert db_dialect.table_bytes(conn, ["jobs", "scraps"]) > empty > 0


def test_session_defaults_privileges_and_column_types_answer_without_error(san_db):
    db_dialect = dialect(san_db.engine)
    with san_db.engine.begin() as conn:
        defaults = db_dialect.session_defaults(conn)
        assert db_dialect.missing_privileges(conn, [("jobs", "SELECT"), ("jobs", "INSERT")]) == []
    if san_db.kind == "postgres":
        assert defaults["DateStyle"] and "TimeZone" in defaults
    naive = type("Reflected", (), {"timezone": False})()
    problem = db_dialect.column_type_problem(Column("created_at", DateTime(timezone=True)), naive)
    assert (problem is None) is (san_db.kind == "sqlite")  # SQLite reflects no time zone


def test_the_optional_capabilities_answer_none_where_the_dialect_has_none(san_db):
    db_dialect = dialect(san_db.engine)
    source = JobSource(job_type=CARD_ANALYSIS, requests=[EnqueueRequest(1)])
    with san_db.engine.begin() as conn:
        fused = db_dialect.fused_enqueue(conn, source)
    announce = db_dialect.announce_statement("san_jobs")
    if san_db.kind == "sqlite":
        assert fused is None and announce is None and db_dialect.DEFAULT_DISPATCHER == "none"
    else:  # without ix_san_jobs_target the portable path is faster: no fused statement
        assert fused is None and isinstance(announce, Executable)
        assert db_dialect.DEFAULT_DISPATCHER == "pg_notify"


def test_a_url_of_each_backend_is_normalised_to_the_driver_batch_pipeline_uses():
    from sqlalchemy.engine import make_url

    assert DIALECTS["postgresql"].normalise_url(make_url("postgres://u@h/db")).drivername == (
        "postgresql+psycopg"
    )
    assert DIALECTS["sqlite"].normalise_url(make_url("sqlite:///x.db")).drivername == "sqlite"


def test_a_timestamp_is_read_back_as_the_same_aware_instant(san_db):
    saved = datetime(2026, 11, 30, 23, 59, 58, 123000, tzinfo=UTC)
    job = san_db.job(CARD_ANALYSIS, 1, created_at=saved, updated_at=saved + timedelta(seconds=1))
    with san_db.engine.begin() as conn:
        [(created,)] = named_rows(
            conn.execute(select(jobs.c.created_at).where(jobs.c.id == job)), ("created_at",)
        )
    assert created.replace(tzinfo=created.tzinfo or UTC) == saved  # SQLite: naive UTC
