"""The shared enqueue path: one active job per (job_type, target_id), the poison cap, the
write-time re-check. On PostgreSQL with ix_san_jobs_target it is one statement per batch, and
without it a count query and an insert: every test runs on SQLite and on both PostgreSQL paths."""

import threading

import pytest
from sqlalchemy import text

from batch_pipeline.san import enqueue as enqueue_module
from batch_pipeline.san.database import write_transaction
from batch_pipeline.san.dispatch import Dispatcher
from batch_pipeline.san.enqueue import BatchWritten, enqueue_jobs, run_in_batches
from batch_pipeline.san.job_source import Eligibility, EnqueueRequest
from batch_pipeline.san.limits import WriteLimits
from batch_pipeline.san.schema import app_guarantee_statement
from batch_pipeline.san.tables import (
    CARD_ANALYSIS,
    COMPLETED,
    FAILED,
    PENDING,
    PROCESSING,
    SCRAP_REFINE,
    scraps,
)
from batch_pipeline_tests.conftest import PG_WRITE_PATHS, WRITE_PATHS, san_database_on_path


@pytest.fixture(params=WRITE_PATHS)
def db(request, tmp_path):
    with san_database_on_path(request.param, tmp_path) as database:
        yield database


def enqueue(db, job_type, targets, max_attempts=10, eligibility=None, retry_of=None):
    with write_transaction(db.engine) as conn:
        return enqueue_jobs(
            conn,
            job_type,
            [EnqueueRequest(t, (retry_of or {}).get(t)) for t in targets],
            now=db.now,
            max_attempts=max_attempts,
            eligibility=eligibility,
        )


def test_enqueue_creates_one_job_per_distinct_target(db):
    outcome = enqueue(db, CARD_ANALYSIS, [1, 2, 2, 3])
    assert sorted(job.target_id for job in outcome.created) == [1, 2, 3]
    rows = db.jobs()
    assert [(r.job_type, r.status, r.retry_of_job_id) for r in rows] == [
        (CARD_ANALYSIS, PENDING, None)
    ] * 3
    assert {job.job_id for job in outcome.created} == {r.id for r in rows}
    assert [job.job_id for job in outcome.created] == sorted(job.job_id for job in outcome.created)


def test_enqueue_never_makes_a_second_active_job(db):
    db.job(CARD_ANALYSIS, 1, PENDING)
    db.job(CARD_ANALYSIS, 2, PROCESSING)
    db.job(CARD_ANALYSIS, 3, COMPLETED)
    outcome = enqueue(db, CARD_ANALYSIS, [1, 2, 3])
    assert sorted(outcome.already_active) == [1, 2] and [j.target_id for j in outcome.created] == [
        3
    ]
    # another job type for the same target is independent
    assert len(enqueue(db, SCRAP_REFINE, [1]).created) == 1


def test_enqueue_respects_the_poison_cap(db):
    for _ in range(2):
        db.job(CARD_ANALYSIS, 1, FAILED)
    assert enqueue(db, CARD_ANALYSIS, [1], max_attempts=2).exhausted == [1]
    assert enqueue(db, CARD_ANALYSIS, [1], max_attempts=0).created  # 0 = unlimited
    db.job(CARD_ANALYSIS, 2, FAILED)
    assert len(enqueue(db, CARD_ANALYSIS, [2], max_attempts=3).created) == 1


def test_a_replacement_carries_its_retry_of_id(db):
    failed = db.job(CARD_ANALYSIS, 7, FAILED)
    [job] = enqueue(db, CARD_ANALYSIS, [7], retry_of={7: failed}).created
    assert job.retry_of_job_id == failed and db.get_job(job.job_id).retry_of_job_id == failed


def test_targets_that_no_longer_need_the_job_are_dropped(db):
    user = db.user()
    unrefined = db.scrap(user, refined=False)
    refined = db.scrap(user, refined=True)  # a worker refined it since detection
    outcome = enqueue(
        db,
        SCRAP_REFINE,
        [unrefined, refined, 999_999],
        eligibility=Eligibility(scraps, scraps.c.refined_content.is_(None)),
    )
    assert [j.target_id for j in outcome.created] == [unrefined]
    assert outcome.exhausted == [] and outcome.already_active == []
    assert [j.target_id for j in db.jobs()] == [unrefined]


def test_a_job_in_an_unknown_status_counts_as_active_at_write_time(db):
    # detection said "no active job"; by the write a job in a status the pipeline does not know
    # appeared (the app's new state, a lower-case typo): it may be live, so no second job
    db.job(CARD_ANALYSIS, 1, "pending")
    db.job(CARD_ANALYSIS, 2, "CANCELLING")
    db.job(CARD_ANALYSIS, 3, FAILED)
    outcome = enqueue(db, CARD_ANALYSIS, [1, 2, 3])
    assert sorted(outcome.already_active) == [1, 2] and [j.target_id for j in outcome.created] == [
        3
    ]


# What show-indexes and doctor offer SAN's app: at most one active job per (job_type, target_id).
# the same statement, without CONCURRENTLY
APP_UNIQUE_ACTIVE_JOB = app_guarantee_statement("sqlite")


@pytest.mark.parametrize("path", PG_WRITE_PATHS)
def test_the_apps_own_enqueue_racing_the_insert_is_skipped_not_a_failed_batch(path, tmp_path):
    # The app does not take batch_pipeline's advisory lock. Its job for target 7 is inserted but
    # not yet committed when the batch runs: the batch's check cannot see it, its insert waits
    # on the unique index, and once the app commits, target 7 is a conflict: skipped, and the
    # rest of the batch is written (a plain INSERT raised UniqueViolation and lost the batch).
    with san_database_on_path(path, tmp_path) as db:
        with db.engine.begin() as conn:
            conn.execute(text(APP_UNIQUE_ACTIVE_JOB))
        app = db.engine.connect()
        app_transaction = app.begin()
        app.execute(
            text(
                "INSERT INTO jobs (job_type, target_id, status, created_at, updated_at) "
                "VALUES ('CARD_ANALYSIS', 7, 'PENDING', now(), now())"
            )
        )
        committer = threading.Timer(1.0, app_transaction.commit)
        committer.start()
        try:
            outcome = enqueue(db, CARD_ANALYSIS, [7, 8])
        finally:
            committer.join()
            app.close()
        assert [j.target_id for j in outcome.created] == [8]
        assert [(j.target_id, j.status) for j in db.jobs()] == [(7, PENDING), (8, PENDING)]


class FakeClock:
    """time for run_in_batches: a batch takes what the test says; pauses are recorded."""

    def __init__(self):
        self.now = 0.0
        self.pauses = []

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        if seconds:
            self.pauses.append(seconds)
            self.now += seconds


@pytest.mark.parametrize("ratio, pauses", [(2.0, [0.5, 0.5]), (0.0, [])])
def test_write_batches_rest_between_each_other_in_proportion_to_their_time(
    db, monkeypatch, ratio, pauses
):
    clock = FakeClock()
    monkeypatch.setattr(enqueue_module, "time", clock)

    def write(conn, batch):
        clock.now += 0.25  # the batch's own time
        outcome = enqueue_jobs(
            conn, CARD_ANALYSIS, [EnqueueRequest(t) for t in batch], now=db.now, max_attempts=10
        )
        return BatchWritten(outcome, outcome.created)

    results, report = run_in_batches(
        db.engine, Dispatcher(), [1, 2, 3, 4, 5], 2, write, WriteLimits(batch_pause_ratio=ratio)
    )
    assert report.batches == 3 and sum(len(r.created) for r in results) == 5
    assert clock.pauses == pauses  # between batches, none after the last
    assert sorted(r.target_id for r in db.jobs(job_type=CARD_ANALYSIS, status=PENDING)) == [
        1,
        2,
        3,
        4,
        5,
    ]
