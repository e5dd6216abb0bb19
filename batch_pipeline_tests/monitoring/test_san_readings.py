"""What the endpoint reads from SAN: ghosts by the design's rule, the oldest active job, the
workers' recent failures (not the ghosts batch_pipeline closed), on both dialects."""

from batch_pipeline.monitoring.san_readings import active_jobs_query, read_san
from batch_pipeline.recovery.ghost_jobs import CLOSED_BY
from batch_pipeline.recovery.ghost_rule import GhostRule
from batch_pipeline.san.database import database_now, read_transaction
from batch_pipeline.san.schema import create_recommended_indexes
from batch_pipeline.san.tables import (
    CARD_ANALYSIS,
    FAILED,
    PENDING,
    PROCESSING,
    SCRAP_REFINE,
    TIL_GENERATION,
    jobs,
)


def readings(db):
    with read_transaction(db.engine) as conn:
        return read_san(conn)


def by_kind(san):
    return {(a.job_type, a.status): a for a in san.active_jobs}


def test_ghosts_and_the_oldest_active_job_per_type_and_status(san_db):
    for target in range(3):  # PENDING > 30 min: ghosts
        san_db.job(CARD_ANALYSIS, target, PENDING, created_at=san_db.ago(minutes=31 + target))
    san_db.job(CARD_ANALYSIS, 10, PENDING, created_at=san_db.ago(minutes=29))  # not yet
    # PROCESSING: by when it started, not when it was created
    san_db.job(
        SCRAP_REFINE, 20, PROCESSING, created_at=san_db.ago(hours=5), started_at=san_db.ago(hours=2)
    )
    san_db.job(
        SCRAP_REFINE,
        21,
        PROCESSING,
        created_at=san_db.ago(hours=5),
        started_at=san_db.ago(minutes=5),
    )
    kinds = by_kind(readings(san_db))
    pending = kinds[(CARD_ANALYSIS, PENDING)]
    assert (pending.active, pending.stale) == (4, 3)
    assert 33 * 60 - 5 <= pending.oldest_age_seconds <= 33 * 60 + 60
    processing = kinds[(SCRAP_REFINE, PROCESSING)]
    assert (processing.active, processing.stale) == (2, 1)
    assert 2 * 3600 - 5 <= processing.oldest_age_seconds <= 2 * 3600 + 60
    # every known (job_type, active status) is there, at zero when none: a series never vanishes
    empty = kinds[(TIL_GENERATION, PROCESSING)]
    assert (empty.active, empty.stale, empty.oldest_age_seconds) == (0, 0, 0.0)
    assert len(kinds) == 6


def test_recent_failures_are_the_workers_not_the_ghosts_batch_pipeline_closed(san_db):
    worker_failed = san_db.job(CARD_ANALYSIS, 1, FAILED, updated_at=san_db.ago(minutes=2))
    closed = san_db.job(CARD_ANALYSIS, 2, FAILED, updated_at=san_db.ago(minutes=2))
    san_db.job(CARD_ANALYSIS, 3, FAILED, updated_at=san_db.ago(minutes=30))  # too old
    san_db.job(TIL_GENERATION, 4, FAILED, updated_at=san_db.ago(minutes=1))
    with san_db.engine.begin() as conn:
        conn.execute(
            jobs.update().where(jobs.c.id == closed).values(error_message=f"{CLOSED_BY}: x")
        )
        conn.execute(
            jobs.update().where(jobs.c.id == worker_failed).values(error_message="AI timeout")
        )
    san = readings(san_db)
    assert san.failed_recent == {CARD_ANALYSIS: 1, SCRAP_REFINE: 0, TIL_GENERATION: 1}


def test_the_lane_s_missing_indexes_are_named(san_db):
    assert "ix_san_jobs_active_covering" in readings(san_db).lane_indexes_missing
    create_recommended_indexes(san_db.engine)
    assert readings(san_db).lane_indexes_missing == ()


def test_the_active_jobs_are_counted_from_the_index_alone(pg_db):
    """An index-only scan: at 750,000 active jobs, fetching each from the heap ran over the
    reading's statement timeout (docs/benchmarks.md)."""
    pg_db.job(CARD_ANALYSIS, 1, PENDING, created_at=pg_db.ago(minutes=40))
    create_recommended_indexes(pg_db.engine)
    with pg_db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM ANALYZE jobs")
    with pg_db.engine.connect() as conn:
        now = database_now(conn)
    plan = pg_db.plan(active_jobs_query(GhostRule(now=now)), "enable_seqscan = off")
    assert "Index Only Scan using ix_san_jobs_active_covering" in plan, plan
