"""What only the PostgreSQL dialect does: the settings every transaction reads values with, the
caches of the catalog probes, the array literal."""

from sqlalchemy import select, text

from batch_pipeline.recovery.orphan_scraps import ORPHAN_SCRAPS
from batch_pipeline.recovery.targets import detect_targets
from batch_pipeline.san.database import create_san_engine, database_now, read_transaction
from batch_pipeline.san.dialects import postgresql
from batch_pipeline.san.limits import WriteLimits
from batch_pipeline.san.schema import create_recommended_indexes
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


def test_the_target_index_probe_is_cached_per_connection(pg_db):
    with pg_db.engine.connect() as conn:
        assert postgresql.has_target_index(conn) is False
    create_recommended_indexes(pg_db.engine)
    pg_db.engine.dispose()  # a new connection asks again
    with pg_db.engine.connect() as conn:
        assert postgresql.has_target_index(conn) is True
        assert postgresql.has_unique_job_index(conn) is False


def test_a_batch_of_ids_is_one_array_literal():
    process = postgresql.BigIntArray.bind_processor(None)
    assert process([3, 1, 2]) == "{3,1,2}"
    assert process([1, None]) == "{1,NULL}"
    assert process(None) is None


def test_the_write_lock_serialises_batch_pipelines_writers_only(pg_db):
    with pg_db.engine.begin() as conn:
        postgresql.take_write_lock(conn, WriteLimits())
        held = conn.execute(
            text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted")
        ).scalar_one()
    assert held >= 1


def test_every_transaction_leaves_the_cores_to_the_app(pg_db):
    """No parallel workers for any query of batch_pipeline, whatever the server's default:
    they would take the app's cores (docs/benchmarks.md, "The app's latency while
    batch_pipeline heals")."""
    engine = create_san_engine(
        with_session_defaults(pg_db.url, "-cmax_parallel_workers_per_gather=4")
    )
    try:
        with engine.connect() as conn:
            default = conn.execute(
                text("SELECT reset_val FROM pg_settings WHERE name = :name"),
                {"name": "max_parallel_workers_per_gather"},
            ).scalar_one()
            inside = conn.execute(text("SHOW max_parallel_workers_per_gather")).scalar_one()
        assert (default, inside) == ("4", "0")
    finally:
        engine.dispose()
