"""The ghost-job rule, next to its constants: PENDING > 30 min by created_at, PROCESSING > 1 h
by started_at (else updated_at); finished jobs never; none younger than the shorter threshold;
the thresholds a run may change."""

from datetime import datetime, timedelta

from sqlalchemy import func, select, update

from batch_pipeline.recovery.ghost_jobs import detect_ghost_jobs
from batch_pipeline.recovery.ghost_rule import (
    STALE_PENDING_AFTER,
    STALE_PROCESSING_AFTER,
    GhostRule,
    is_stale,
)
from batch_pipeline.san.schema import create_recommended_indexes
from batch_pipeline.san.tables import (
    CARD_ANALYSIS,
    COMPLETED,
    FAILED,
    PENDING,
    PROCESSING,
    SCRAP_REFINE,
    jobs,
)


def detect(db, **rule):
    with db.engine.connect() as conn:
        return detect_ghost_jobs(conn, GhostRule(now=db.now, **rule))


def test_a_rule_s_cut_offs_are_its_thresholds_before_now():
    now = datetime(2026, 12, 3, 12, 0)
    rule = GhostRule(now=now)
    assert (rule.pending_cutoff, rule.processing_cutoff) == (
        now - timedelta(minutes=30),
        now - timedelta(hours=1),
    )


def test_pending_is_a_ghost_after_30_minutes_not_before(san_db):
    assert STALE_PENDING_AFTER == timedelta(minutes=30)  # the design's rule
    fresh = san_db.job(
        CARD_ANALYSIS,
        1,
        PENDING,
        created_at=san_db.now - STALE_PENDING_AFTER + timedelta(minutes=1),
    )
    stale = san_db.job(
        CARD_ANALYSIS,
        2,
        PENDING,
        created_at=san_db.now - STALE_PENDING_AFTER - timedelta(minutes=1),
    )
    assert detect(san_db)["job_id"].tolist() == [stale]
    assert fresh not in detect(san_db)["job_id"].tolist()


def test_processing_is_a_ghost_after_60_minutes_from_started_at(san_db):
    assert STALE_PROCESSING_AFTER == timedelta(minutes=60)  # the design's rule
    running = san_db.job(
        CARD_ANALYSIS,
        1,
        PROCESSING,
        created_at=san_db.ago(hours=3),
        started_at=san_db.now - STALE_PROCESSING_AFTER + timedelta(minutes=1),
    )
    stuck = san_db.job(
        CARD_ANALYSIS,
        2,
        PROCESSING,
        created_at=san_db.ago(hours=3),
        started_at=san_db.now - STALE_PROCESSING_AFTER - timedelta(minutes=1),
    )
    # started_at decides even when a worker touched updated_at recently
    stuck_touched = san_db.job(
        CARD_ANALYSIS,
        3,
        PROCESSING,
        created_at=san_db.ago(hours=3),
        started_at=san_db.now - STALE_PROCESSING_AFTER - timedelta(minutes=1),
        updated_at=san_db.ago(minutes=1),
    )
    found = detect(san_db)["job_id"].tolist()
    assert running not in found
    assert sorted(found) == sorted([stuck, stuck_touched])


def test_processing_with_null_started_at_ages_from_updated_at(san_db):
    recent = san_db.job(
        SCRAP_REFINE,
        1,
        PROCESSING,
        created_at=san_db.ago(hours=5),
        updated_at=san_db.now - STALE_PROCESSING_AFTER + timedelta(minutes=1),
    )
    old = san_db.job(
        SCRAP_REFINE,
        2,
        PROCESSING,
        created_at=san_db.ago(hours=5),
        updated_at=san_db.now - STALE_PROCESSING_AFTER - timedelta(minutes=1),
    )
    ghosts = detect(san_db)
    assert ghosts["job_id"].tolist() == [old]
    assert recent not in ghosts["job_id"].tolist()


def test_completed_and_failed_jobs_are_never_ghosts(san_db):
    san_db.job(CARD_ANALYSIS, 1, COMPLETED, created_at=san_db.ago(days=3))
    san_db.job(CARD_ANALYSIS, 2, FAILED, created_at=san_db.ago(days=3))
    assert detect(san_db).empty


def test_thresholds_are_configurable(san_db):
    job = san_db.job(CARD_ANALYSIS, 1, PENDING, created_at=san_db.ago(minutes=20))
    assert detect(san_db).empty
    assert detect(san_db, stale_pending_after=timedelta(minutes=15))["job_id"].tolist() == [job]


def test_no_job_is_stale_before_it_has_existed_for_the_shorter_threshold(san_db):
    """A worker whose clock runs behind the database's stamps started_at before created_at: such
    a job is stale once it has existed for the shorter threshold, not before."""
    rule = {"stale_processing_after": timedelta(minutes=10)}  # shorter than PENDING's 30
    skewed = san_db.job(
        CARD_ANALYSIS,
        1,
        PROCESSING,
        created_at=san_db.ago(minutes=9),
        started_at=san_db.ago(minutes=11),
    )
    assert GhostRule(now=san_db.now, **rule).shortest_stale_age == timedelta(minutes=10)
    assert detect(san_db, **rule).empty
    with san_db.engine.begin() as conn:
        conn.execute(update(jobs).values(created_at=san_db.ago(minutes=10, seconds=1)))
    assert detect(san_db, **rule)["job_id"].tolist() == [skewed]


def test_the_rule_reads_a_created_at_range_of_the_active_jobs_index(pg_db):
    """The app's churn is at the recent end of the index (its just-finished jobs' dead entries,
    until autovacuum clears them): a count of the stale jobs stops before it."""
    pg_db.job(CARD_ANALYSIS, 1, PROCESSING, started_at=pg_db.ago(hours=2))
    create_recommended_indexes(pg_db.engine)
    stale = is_stale(GhostRule(now=pg_db.now))
    count = select(func.count()).select_from(jobs).where(stale)
    plan = pg_db.plan(count, "enable_seqscan = off", "enable_bitmapscan = off")
    assert pg_db.count(jobs, stale) == 1
    assert "ix_san_jobs_active_covering" in plan, plan
    assert "Index Cond: (created_at <" in plan, plan
