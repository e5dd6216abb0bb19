"""Ghost jobs: PENDING > 30 min / PROCESSING > 1 h -> FAILED + enqueue again."""

import threading
from datetime import timedelta

import pytest
from sqlalchemy import text, update

from batch_pipeline.recovery import ghost_jobs
from batch_pipeline.recovery.ghost_closing import recover_ghost_jobs
from batch_pipeline.recovery.ghost_jobs import (
    GhostRule,
    detect_ghost_jobs,
)
from batch_pipeline.recovery.plan import RecoveryPolicy
from batch_pipeline.san.dialects.postgresql import has_target_index
from batch_pipeline.san.dispatch import Dispatcher
from batch_pipeline.san.tables import (
    CARD_ANALYSIS,
    COMPLETED,
    FAILED,
    JOB_TYPES,
    PENDING,
    PROCESSING,
    SCRAP_REFINE,
    TIL_GENERATION,
    jobs,
)
from batch_pipeline_tests.conftest import (
    PG_WRITE_PATHS,
    WRITE_PATHS,
    DiesOnBatch,
    san_database_on_path,
)
from batch_pipeline_tests.sweeps import chunks_of_each_sweep, small_chunks


@pytest.fixture(params=WRITE_PATHS)
def san_db(request, tmp_path):
    """Every ghost test on the three write paths: on PostgreSQL with ix_san_jobs_target the
    close and the replacement are one statement."""
    with san_database_on_path(request.param, tmp_path) as database:
        yield database


@pytest.fixture(params=PG_WRITE_PATHS)
def pg_db(request, tmp_path):
    with san_database_on_path(request.param, tmp_path) as database:
        yield database


def detect(db, **rule):
    with db.engine.connect() as conn:
        return detect_ghost_jobs(conn, GhostRule(now=db.now, **rule))


def recover(
    db,
    ghosts,
    dispatcher=None,
    max_attempts=10,
    max_enqueue_per_run=5000,
    batch_size=1000,
    dry_run=False,
    now=None,
):
    return recover_ghost_jobs(
        db.engine,
        dispatcher or Dispatcher(),
        ghosts,
        GhostRule(now=now or db.now),
        RecoveryPolicy(
            max_attempts=max_attempts,
            max_enqueue_per_run=max_enqueue_per_run,
            batch_size=batch_size,
            dry_run=dry_run,
        ),
    )


def test_every_job_type_is_closed_failed_and_re_enqueued(san_db):
    ghosts = {
        job_type: san_db.job(job_type, 7, PENDING, created_at=san_db.ago(minutes=45))
        for job_type in JOB_TYPES
    }
    stuck = san_db.job(
        CARD_ANALYSIS, 8, PROCESSING, created_at=san_db.ago(hours=4), started_at=san_db.ago(hours=2)
    )
    report = recover(san_db, detect(san_db))

    assert report.detected == report.enqueued == 4
    assert report.skipped_by_race == report.exhausted == report.deferred == 0
    pairs = {pair["failed_job_id"]: pair for pair in report.recovered}
    for old_id in [*ghosts.values(), stuck]:
        old = san_db.get_job(old_id)
        assert old.status == FAILED
        assert old.finished_at is not None and old.updated_at is not None
        new = san_db.get_job(pairs[old_id]["new_job_id"])
        assert (new.job_type, new.target_id, new.status, new.retry_of_job_id) == (
            old.job_type,
            old.target_id,
            PENDING,
            old_id,
        )
        assert new.started_at is None and new.finished_at is None
    message = san_db.get_job(ghosts[TIL_GENERATION]).error_message
    assert "stale in PENDING for 45 min" in message and "threshold 30 min" in message
    assert "stale in PROCESSING for 120 min" in san_db.get_job(stuck).error_message
    assert "threshold 60 min" in san_db.get_job(stuck).error_message


def test_attempts_are_counted_a_few_targets_a_statement_and_none_is_lost(san_db, monkeypatch):
    """Ghosts of one target under two job types, targets with 1 to 3 attempts: counted 2
    targets a statement, the same attempts and order as before the count was chunked; no
    statement of ours counts 25,000 ghosts' attempts at once."""
    small_chunks(monkeypatch, 2)
    chunked = chunks_of_each_sweep(monkeypatch, ghost_jobs, "swept_among")
    expected = {}
    for number in range(7):
        job_type = JOB_TYPES[number % len(JOB_TYPES)]
        target = 100 + number // 2  # two ghosts share a target, under other job types
        for _ in range(number % 3):
            san_db.job(job_type, target, FAILED, created_at=san_db.ago(hours=5))
        ghost = san_db.job(
            job_type, target, PENDING, created_at=san_db.ago(hours=2, minutes=number)
        )
        expected[ghost] = number % 3 + 1
    san_db.job(JOB_TYPES[2], 100, FAILED)  # another job type's attempt on 100: not counted
    ghosts = detect(san_db)
    assert dict(zip(ghosts["job_id"], ghosts["attempts"], strict=True)) == expected
    assert list(ghosts["job_id"]) == sorted(expected, reverse=True)  # oldest first
    assert chunked == [2]  # 4 targets, 2 a statement


def test_a_second_run_finds_nothing_more(san_db):
    san_db.job(CARD_ANALYSIS, 1, PENDING, created_at=san_db.ago(hours=1))
    assert recover(san_db, detect(san_db)).enqueued == 1
    assert detect(san_db).empty


def test_poison_cap_closes_the_ghost_without_a_replacement(san_db):
    for _ in range(2):
        san_db.job(CARD_ANALYSIS, 5, FAILED, created_at=san_db.ago(hours=5))
    ghost = san_db.job(CARD_ANALYSIS, 5, PENDING, created_at=san_db.ago(hours=1))
    ghosts = detect(san_db)
    assert ghosts["attempts"].tolist() == [3]

    report = recover(san_db, ghosts, max_attempts=3)
    assert report.exhausted == 1 and report.exhausted_ids == [ghost]
    assert report.enqueued == 0
    assert san_db.get_job(ghost).status == FAILED
    assert len(san_db.jobs(target_id=5)) == 3


def test_max_attempts_zero_is_unlimited(san_db):
    for _ in range(20):
        san_db.job(CARD_ANALYSIS, 5, FAILED, created_at=san_db.ago(hours=5))
    san_db.job(CARD_ANALYSIS, 5, PENDING, created_at=san_db.ago(hours=1))
    assert recover(san_db, detect(san_db), max_attempts=0).enqueued == 1


def test_per_run_cap_takes_the_oldest_and_defers_the_rest_untouched(san_db):
    ids = [
        san_db.job(CARD_ANALYSIS, target, PENDING, created_at=san_db.ago(hours=10 - target))
        for target in range(5)
    ]
    report = recover(san_db, detect(san_db), max_enqueue_per_run=2)
    assert report.enqueued == 2 and report.deferred == 3
    assert [pair["failed_job_id"] for pair in report.recovered] == ids[:2]
    assert sorted(report.deferred_ids) == sorted(ids[2:])
    assert [san_db.get_job(i).status for i in ids] == [FAILED, FAILED, PENDING, PENDING, PENDING]
    # the next run takes the deferred ones
    assert recover(san_db, detect(san_db)).enqueued == 3


def test_dry_run_writes_nothing(san_db):
    ghost = san_db.job(CARD_ANALYSIS, 1, PENDING, created_at=san_db.ago(hours=1))
    report = recover(san_db, detect(san_db), dry_run=True)
    assert (
        report.dry_run and report.detected == 1 and report.enqueued == 0 and report.recovered == []
    )
    assert san_db.get_job(ghost).status == PENDING
    assert len(san_db.jobs()) == 1


def test_a_job_a_worker_completes_after_detection_is_not_failed(san_db):
    finished = san_db.job(CARD_ANALYSIS, 1, PENDING, created_at=san_db.ago(hours=1))
    restarted = san_db.job(
        SCRAP_REFINE, 1, PROCESSING, created_at=san_db.ago(hours=3), started_at=san_db.ago(hours=2)
    )
    other = san_db.job(CARD_ANALYSIS, 2, PENDING, created_at=san_db.ago(hours=1))
    ghosts = detect(san_db)
    with san_db.engine.begin() as conn:  # a worker, between detection and write
        conn.execute(
            update(jobs)
            .where(jobs.c.id == finished)
            .values(status=COMPLETED, finished_at=san_db.now)
        )
        conn.execute(
            update(jobs)
            .where(jobs.c.id == restarted)
            .values(started_at=san_db.now, updated_at=san_db.now)
        )

    report = recover(san_db, ghosts)
    assert report.skipped_by_race == 2 and report.enqueued == 1
    assert san_db.get_job(finished).status == COMPLETED
    assert san_db.get_job(restarted).status == PROCESSING
    assert san_db.get_job(other).status == FAILED
    assert len(san_db.jobs()) == 4


@pytest.mark.parametrize("batch_size", [1, 1000], ids=["different_batches", "one_batch"])
def test_duplicate_ghosts_of_one_target_get_one_replacement(san_db, batch_size):
    first = san_db.job(CARD_ANALYSIS, 9, PENDING, created_at=san_db.ago(hours=2))
    second = san_db.job(CARD_ANALYSIS, 9, PENDING, created_at=san_db.ago(hours=1))
    report = recover(san_db, detect(san_db), batch_size=batch_size)
    assert {san_db.get_job(first).status, san_db.get_job(second).status} == {FAILED}
    active = [j for j in san_db.jobs(target_id=9) if j.status == PENDING]
    assert len(active) == 1 and active[0].retry_of_job_id in (first, second)
    assert report.enqueued == 1


def test_a_ghost_whose_target_has_another_active_job_gets_no_second_one(san_db):
    ghost = san_db.job(CARD_ANALYSIS, 4, PENDING, created_at=san_db.ago(hours=2))
    live = san_db.job(CARD_ANALYSIS, 4, PENDING, created_at=san_db.ago(minutes=5))
    report = recover(san_db, detect(san_db))
    assert san_db.get_job(ghost).status == FAILED
    assert [j.id for j in san_db.jobs(target_id=4, status=PENDING)] == [live]
    assert report.enqueued == 0


def test_two_overlapping_runs_close_each_ghost_once(san_db):
    ids = [
        san_db.job(CARD_ANALYSIS, target, PENDING, created_at=san_db.ago(hours=1))
        for target in range(6)
    ]
    ghosts_a, ghosts_b = detect(san_db), detect(san_db)  # both runs detect before either writes
    barrier = threading.Barrier(2)
    reports = []

    def run(ghosts, now):
        barrier.wait()
        reports.append(recover(san_db, ghosts, batch_size=2, now=now))

    # each run writes at its own instant (its detection's): the other's closures are races
    runs = [(ghosts_a, san_db.now), (ghosts_b, san_db.now + timedelta(milliseconds=1))]
    threads = [threading.Thread(target=run, args=args) for args in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert sum(r.enqueued for r in reports) == 6
    assert sum(r.skipped_by_race for r in reports) == 6
    for target in range(6):
        rows = san_db.jobs(target_id=target)
        assert [r.status for r in rows] == [FAILED, PENDING]
        assert rows[1].retry_of_job_id == ids[target]


def test_a_crash_between_batches_leaves_no_ghost_without_a_replacement(san_db):
    ids = [
        san_db.job(CARD_ANALYSIS, target, PENDING, created_at=san_db.ago(hours=1))
        for target in range(6)
    ]
    with pytest.raises(RuntimeError, match="killed"):
        recover(san_db, detect(san_db), dispatcher=DiesOnBatch(2), batch_size=2)

    statuses = [san_db.get_job(i).status for i in ids]
    # batch 1 whole, batch 2 rolled back
    assert statuses == [
        FAILED,
        FAILED,
        PENDING,
        PENDING,
        PENDING,
        PENDING,
    ]
    for failed in san_db.jobs(status=FAILED):
        assert len(san_db.jobs(retry_of_job_id=failed.id)) == 1
    assert len(san_db.jobs()) == 8

    report = recover(san_db, detect(san_db))  # the next run finishes the work
    assert report.enqueued == 4
    assert all(san_db.get_job(i).status == FAILED for i in ids)
    assert len(san_db.jobs(status=PENDING)) == 6


def test_a_job_locked_by_a_worker_is_skipped_not_waited_for(pg_db):
    locked = pg_db.job(CARD_ANALYSIS, 1, PENDING, created_at=pg_db.ago(hours=1))
    free = pg_db.job(CARD_ANALYSIS, 2, PENDING, created_at=pg_db.ago(hours=1))
    ghosts = detect(pg_db)
    worker = pg_db.engine.connect()
    transaction = worker.begin()
    worker.execute(text("SELECT id FROM jobs WHERE id = :id FOR UPDATE"), {"id": locked})
    try:
        report = recover(pg_db, ghosts)
    finally:
        transaction.rollback()
        worker.close()
    assert report.skipped_by_race == 1 and report.enqueued == 1
    assert pg_db.get_job(locked).status == PENDING
    assert pg_db.get_job(free).status == FAILED


def test_two_overlapping_runs_while_a_worker_completes_the_same_jobs(pg_db):
    """Both runs detect, then write at the same moment as a worker that completes half of the very
    ghosts they examine, from the other end (one transaction per job, only if still PENDING: the
    worker contract), so the two meet in the middle. No completed job is marked FAILED, each ghost
    is closed once, and no target ever has two active jobs."""
    ids = [
        pg_db.job(CARD_ANALYSIS, target, PENDING, created_at=pg_db.ago(hours=1))
        for target in range(200)
    ]
    frames = [detect(pg_db), detect(pg_db)]
    start = threading.Barrier(3)
    reports, completed = [], []

    def recovery(ghosts):
        start.wait()
        reports.append(recover(pg_db, ghosts, batch_size=5))

    def worker():
        start.wait()
        with pg_db.engine.connect() as conn:
            for job_id in reversed(ids):
                with conn.begin():
                    done = conn.execute(
                        update(jobs)
                        .where(jobs.c.id == job_id, jobs.c.status == PENDING)
                        .values(status=COMPLETED, finished_at=pg_db.now, updated_at=pg_db.now)
                        .returning(jobs.c.id)
                    ).scalar()
                if done:
                    completed.append(done)

    threads = [threading.Thread(target=recovery, args=(f,)) for f in frames] + [
        threading.Thread(target=worker)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    closed = sum(len(r.recovered) for r in reports)
    print(f"completed by the worker {len(completed)}, closed by recovery {closed}")
    failed = {j.id for j in pg_db.jobs(status=FAILED)}
    assert not failed & set(completed)  # a job the worker completed was never failed
    assert failed | set(completed) == set(ids)  # every ghost ended one way or the other
    assert closed == len(failed)  # each ghost closed exactly once across the two runs
    assert completed and failed  # the race really happened on both sides
    for target in range(200):
        rows = pg_db.jobs(target_id=target)
        assert sum(r.status in (PENDING, PROCESSING) for r in rows) <= 1
        if rows[0].status == FAILED:
            assert [r.retry_of_job_id for r in rows[1:]] == [rows[0].id]  # exactly one replacement


def test_detection_turns_sequential_scans_off_only_when_both_indexes_are_there(pg_db):
    ghost = pg_db.job(CARD_ANALYSIS, 1, PENDING, created_at=pg_db.ago(hours=1))
    indexed = has_target_index_on(pg_db)
    with pg_db.engine.begin() as conn:
        assert detect_ghost_jobs(conn, GhostRule(now=pg_db.now))["job_id"].tolist() == [ghost]
        assert conn.execute(text("SHOW enable_seqscan")).scalar() == ("off" if indexed else "on")
    with pg_db.engine.connect() as conn:  # transaction-local
        assert conn.execute(text("SHOW enable_seqscan")).scalar() == "on"


def has_target_index_on(db):
    with db.engine.connect() as conn:
        return has_target_index(conn)
