"""The shared enqueue path: one active job per (job_type, target_id), the poison cap."""

from batch_pipeline.san.database import write_transaction
from batch_pipeline.san.enqueue import EnqueueRequest, enqueue_jobs
from batch_pipeline.san.schema import CARD_ANALYSIS, FAILED, PENDING, SCRAP_REFINE


def enqueue(db, job_type, targets, max_attempts=10):
    with write_transaction(db.engine) as conn:
        return enqueue_jobs(conn, job_type, [EnqueueRequest(t) for t in targets], now=db.now, max_attempts=max_attempts)


def test_enqueue_creates_one_job_per_distinct_target(san_db):
    outcome = enqueue(san_db, CARD_ANALYSIS, [1, 2, 2, 3])
    assert sorted(job.target_id for job in outcome.created) == [1, 2, 3]
    rows = san_db.jobs()
    assert [(r.job_type, r.status, r.retry_of_job_id) for r in rows] == [(CARD_ANALYSIS, PENDING, None)] * 3
    assert {job.job_id for job in outcome.created} == {r.id for r in rows}


def test_enqueue_never_makes_a_second_active_job(san_db):
    san_db.job(CARD_ANALYSIS, 1, PENDING)
    outcome = enqueue(san_db, CARD_ANALYSIS, [1])
    assert outcome.created == [] and outcome.already_active == [1]
    # another job type for the same target is independent
    assert len(enqueue(san_db, SCRAP_REFINE, [1]).created) == 1


def test_enqueue_respects_the_poison_cap(san_db):
    for _ in range(2):
        san_db.job(CARD_ANALYSIS, 1, FAILED)
    assert enqueue(san_db, CARD_ANALYSIS, [1], max_attempts=2).exhausted == [1]
    assert len(enqueue(san_db, CARD_ANALYSIS, [1], max_attempts=3).created) == 1
