"""Redrive as plain functions, on every write path: which exhausted targets match, one job beyond
the cap through the enqueue path's guards, and how the recoveries count it afterwards."""

import threading
from datetime import timedelta

import pytest
from sqlalchemy import update

from batch_pipeline.fast_lane.retries import due_retries
from batch_pipeline.recovery.orphan_scraps import ORPHAN_SCRAPS
from batch_pipeline.recovery.targets import ORPHAN_MIN_AGE
from batch_pipeline.recovery.unwritten_tils import UNWRITTEN_TILS
from batch_pipeline.san.database import database_now, read_transaction
from batch_pipeline.san.dispatch import Dispatcher, build_dispatcher
from batch_pipeline.san.tables import CARD_ANALYSIS, FAILED, PENDING, TIL_GENERATION, jobs
from batch_pipeline.support.redrive import (
    RedriveFilter,
    RedriveReport,
    exhausted_targets,
    redrive,
)
from batch_pipeline_tests.conftest import WRITE_PATHS, job_notifications, san_database_on_path
from batch_pipeline_tests.runs import latest_metadata, run_recovery
from batch_pipeline_tests.support.conftest import exhausted_scrap, failed_jobs


@pytest.fixture(params=WRITE_PATHS)
def db(request, tmp_path):
    with san_database_on_path(request.param, tmp_path) as database:
        yield database


def matching(db, recovery=ORPHAN_SCRAPS, chosen=RedriveFilter(), max_attempts=10):
    with read_transaction(db.engine) as conn:
        return exhausted_targets(
            conn,
            recovery,
            database_now(conn),
            chosen,
            max_attempts=max_attempts,
            grace=ORPHAN_MIN_AGE,
        )


def apply(db, targets, recovery=ORPHAN_SCRAPS, dispatcher=None, dry_run=False, batch_size=500):
    report = RedriveReport(area=recovery.area, dry_run=dry_run, filter="test", max_attempts=10)
    return redrive(
        db.engine,
        dispatcher or Dispatcher(),
        recovery,
        targets,
        database_now(db.engine),
        report,
        batch_size=batch_size,
    )


def test_only_exhausted_targets_match_oldest_latest_failure_first(db):
    older, _ = exhausted_scrap(db, last_failed_ago=timedelta(hours=5))
    newer, _ = exhausted_scrap(db, last_failed_ago=timedelta(hours=2))
    under_the_cap, _ = exhausted_scrap(db, attempts=9)
    with_card, _ = exhausted_scrap(db)
    db.card(with_card, 1)
    active, _ = exhausted_scrap(db)
    db.job(CARD_ANALYSIS, active, PENDING)
    found = matching(db)
    assert found["scrap_id"].tolist() == [older, newer]
    assert found["attempts"].tolist() == [10, 10]
    assert found["last_error"].tolist() == ["AI 500: model overloaded"] * 2


def test_the_filters_narrow_by_id_latest_failure_and_error_text(db):
    timeout, _ = exhausted_scrap(
        db, error="ReadTimeout after 30 s", last_failed_ago=timedelta(days=3)
    )
    overload, _ = exhausted_scrap(db, error="AI 500: Model Overloaded")
    assert matching(db, chosen=RedriveFilter(target_ids=(timeout,)))["scrap_id"].tolist() == [
        timeout
    ]
    since = db.now - timedelta(days=1)
    assert matching(db, chosen=RedriveFilter(failed_since=since))["scrap_id"].tolist() == [overload]
    # any case, as a substring (not a pattern)
    contains = RedriveFilter(error_message_contains="model overloaded")
    assert matching(db, chosen=contains)["scrap_id"].tolist() == [overload]
    assert matching(db, chosen=RedriveFilter(error_message_contains="(.*)")).empty
    # the latest failure decides: an earlier job's error does not make it match
    failed_jobs(db, timeout, 1, error="AI 500: overloaded again", last_failed_ago=timedelta(0))
    assert matching(db, chosen=RedriveFilter(error_message_contains="timeout")).empty


def test_a_cap_of_zero_means_nothing_is_exhausted(db):
    exhausted_scrap(db)
    assert matching(db, max_attempts=0).empty


def test_a_redrive_gives_one_job_beyond_the_cap_retrying_the_last_failure(db):
    scrap, failed = exhausted_scrap(db)
    report = apply(db, matching(db))
    [new_job] = db.jobs(status=PENDING)
    assert (new_job.target_id, new_job.retry_of_job_id) == (scrap, failed[-1])
    assert report.redriven == [
        {
            "area": ORPHAN_SCRAPS.area,
            "target_id": scrap,
            "new_job_id": new_job.id,
            "attempts_before": 10,
            "last_job_id": failed[-1],
            "last_error": "AI 500: model overloaded",
        }
    ]
    assert report.skipped_by_race_ids == []


def test_a_dry_run_lists_and_writes_nothing(db):
    scrap, _ = exhausted_scrap(db)
    report = apply(db, matching(db), dry_run=True)
    assert db.jobs(status=PENDING) == []
    assert [pair["target_id"] for pair in report.would_redrive] == [scrap]
    assert report.redriven == []


def test_targets_changed_since_they_were_read_are_skipped_by_race(db):
    """The write re-checks each target: it got its card, an active job, or another job that
    failed (a second redrive) since it was read. Without the guards each would get a job."""
    carded, _ = exhausted_scrap(db)
    busy, _ = exhausted_scrap(db)
    redriven_elsewhere, _ = exhausted_scrap(db)
    untouched, _ = exhausted_scrap(db)
    found = matching(db)
    db.card(carded, 1)
    busy_job = db.job(CARD_ANALYSIS, busy, PENDING)
    failed_jobs(db, redriven_elsewhere, 1, last_failed_ago=timedelta(0))
    report = apply(db, found)
    assert [pair["target_id"] for pair in report.redriven] == [untouched]
    assert sorted(report.skipped_by_race_ids) == sorted([carded, busy, redriven_elsewhere])
    assert {job.target_id for job in db.jobs(status=PENDING)} == {busy, untouched}
    assert [job.id for job in db.jobs(status=PENDING) if job.target_id == busy] == [busy_job]


def test_two_redrives_at_once_give_one_job(db):
    scrap, _ = exhausted_scrap(db)
    found = [matching(db), matching(db)]
    barrier = threading.Barrier(2)
    reports = []

    def run(targets):
        barrier.wait()
        reports.append(apply(db, targets))

    threads = [threading.Thread(target=run, args=(targets,)) for targets in found]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(db.jobs(status=PENDING)) == 1
    assert sorted(len(report.redriven) for report in reports) == [0, 1]
    assert sum(len(report.skipped_by_race_ids) for report in reports) == 1
    assert db.count(jobs, jobs.c.target_id == scrap) == 11


def test_a_redrive_racing_a_recovery_run_and_a_worker_leaves_one_active_job(db):
    """recovery_job, a worker and the redrive at the same moment: the worker fails the first
    redriven job at once; whatever the order, the target never has two active jobs, and the
    recovery run never gives it a job of its own (it is at the cap)."""
    scrap, _ = exhausted_scrap(db)
    found = matching(db)
    barrier = threading.Barrier(3)
    outcome = {}

    def the_redrive():
        barrier.wait()
        outcome["redrive"] = apply(db, found)

    def the_recovery():
        barrier.wait()
        outcome["recovery"] = run_recovery(db)[0].success

    def the_worker():
        barrier.wait()
        for _ in range(200):  # fail whatever job the redrive created, as soon as it exists
            with db.engine.begin() as conn:
                done = conn.execute(
                    update(jobs)
                    .where(jobs.c.target_id == scrap, jobs.c.status == PENDING)
                    .values(status=FAILED, updated_at=db.now)
                    .returning(jobs.c.id)
                ).all()
            if done:
                return

    threads = [threading.Thread(target=f) for f in (the_redrive, the_recovery, the_worker)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert outcome["recovery"] is True
    assert len(outcome["redrive"].redriven) == 1
    # 10 + the one redriven job: the recovery added none (the cap counts the redriven one too)
    assert db.count(jobs, jobs.c.target_id == scrap) == 11
    assert len([j for j in db.jobs() if j.target_id == scrap and j.status == PENDING]) <= 1


def test_the_recoveries_leave_a_redriven_target_to_its_job_and_exhaust_it_again_if_it_fails(db):
    """How the cap counts a redrive: the redriven job counts. While it is active, recovery_job
    and the fast lane leave the target alone (not exhausted, no job); if it fails, the target
    is exhausted again, and only another redrive gives it another job."""
    scrap, _ = exhausted_scrap(db)
    [pair] = apply(db, matching(db)).redriven
    result, instance = run_recovery(db)
    assert result.success
    audit = latest_metadata(instance, ORPHAN_SCRAPS.area)
    assert scrap not in audit["exhausted_ids"] and audit["enqueued"] == 0
    assert db.count(jobs, jobs.c.target_id == scrap) == 11
    with db.engine.begin() as conn:  # the redriven job fails too
        conn.execute(
            update(jobs)
            .where(jobs.c.id == pair["new_job_id"])
            .values(status=FAILED, updated_at=db.now - timedelta(minutes=5))
        )
    with read_transaction(db.engine) as conn:
        lane = due_retries(
            conn,
            ORPHAN_SCRAPS,
            database_now(conn),
            grace=ORPHAN_MIN_AGE,
            max_attempts=10,
            last_success={},
        )
    assert scrap not in lane["scrap_id"].tolist()
    result, instance = run_recovery(db, instance)
    audit = latest_metadata(instance, ORPHAN_SCRAPS.area)
    assert scrap in audit["exhausted_ids"] and audit["enqueued"] == 0
    assert matching(db)["attempts"].tolist() == [11]  # redrivable again, by an operator


def test_new_jobs_are_announced_once_after_commit(tmp_path):
    with san_database_on_path("postgres_with_target_index", tmp_path) as db:
        scrap, _ = exhausted_scrap(db)
        with job_notifications(db) as heard:
            dispatcher = build_dispatcher("pg_notify", "postgresql", "", "", heard.channel)
            [pair] = apply(db, matching(db), dispatcher=dispatcher).redriven
        assert [event["job_id"] for event in heard] == [pair["new_job_id"]]
        assert pair["target_id"] == scrap


def test_many_targets_go_in_bounded_batches_of_one_transaction_each(db):
    scraps = [exhausted_scrap(db, attempts=2)[0] for _ in range(7)]
    report = apply(db, matching(db, max_attempts=2), batch_size=3)
    assert sorted(pair["target_id"] for pair in report.redriven) == sorted(scraps)
    assert len(db.jobs(status=PENDING)) == 7


def test_an_unwritten_til_is_redriven_with_a_til_generation_job(db):
    summary = db.summary(db.user(), created_at=db.ago(days=1))
    failed_jobs(db, summary, 10, job_type=TIL_GENERATION)
    report = apply(db, matching(db, recovery=UNWRITTEN_TILS), recovery=UNWRITTEN_TILS)
    [new_job] = db.jobs(status=PENDING)
    assert (new_job.job_type, new_job.target_id) == (TIL_GENERATION, summary)
    assert report.redriven[0]["area"] == UNWRITTEN_TILS.area
