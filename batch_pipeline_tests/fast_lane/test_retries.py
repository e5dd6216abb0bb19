"""Failed AI calls and app deaths (retries.py): a jittered backoff that does not hammer a failing
AI service and heals within about a minute once it works again; the one enqueue path; caps that
reach every target."""

from datetime import timedelta

import pandas as pd
import pytest

from batch_pipeline.fast_lane.retries import (
    APP_DEATH_CATCH_UP,
    HEALTHY_RETRY_CEILING,
    RETRY_AFTER,
    RETRY_BACKOFF_CEILING,
    RETRY_JITTER,
    due_retries,
    jitter,
    retries_metadata,
    retry_waits,
)
from batch_pipeline.recovery.orphan_scraps import ORPHAN_SCRAPS
from batch_pipeline.recovery.plan import RecoveryPolicy
from batch_pipeline.recovery.registry import TARGET_RECOVERIES
from batch_pipeline.recovery.target_writes import recover_targets
from batch_pipeline.recovery.targets import ORPHAN_MIN_AGE
from batch_pipeline.recovery.unrefined_scraps import UNREFINED_SCRAPS
from batch_pipeline.recovery.unwritten_tils import UNWRITTEN_TILS
from batch_pipeline.san.dispatch import Dispatcher
from batch_pipeline.san.tables import CARD_ANALYSIS, FAILED, PENDING, SCRAP_REFINE, TIL_GENERATION
from batch_pipeline_tests.runs import run_recovery

seconds = lambda s: timedelta(seconds=s)  # noqa: E731


def test_the_wait_starts_in_seconds_doubles_and_stops_at_the_recovery_cadence():
    attempts = pd.Series(range(1, 16))
    targets = pd.Series([7] * 15)
    waits = retry_waits(attempts, targets, pd.Series([False] * 15))
    base = [min(RETRY_AFTER * 2 ** (n - 1), RETRY_BACKOFF_CEILING) for n in range(1, 16)]
    for wait, expected in zip(waits, base, strict=True):
        assert expected <= wait <= min(expected * (1 + RETRY_JITTER), RETRY_BACKOFF_CEILING)
    assert waits.iloc[0] < seconds(7) and waits.iloc[-1] == RETRY_BACKOFF_CEILING


def test_once_the_ai_service_works_again_no_wait_is_longer_than_the_healthy_ceiling():
    attempts, targets = pd.Series([1, 5, 9]), pd.Series([1, 2, 3])
    waits = retry_waits(attempts, targets, pd.Series([True, True, True]))
    assert waits.iloc[0] < seconds(7)  # short waits stay short
    assert (waits <= HEALTHY_RETRY_CEILING).all() and waits.iloc[2] == HEALTHY_RETRY_CEILING


def test_the_jitter_is_the_same_for_a_target_and_attempt_and_spreads_targets_apart():
    targets = pd.Series(range(1000))
    first, again = jitter(targets, pd.Series([3] * 1000)), jitter(targets, pd.Series([3] * 1000))
    assert first.equals(again) and first.between(1, 1 + RETRY_JITTER).all()
    assert first.nunique() > 100


def failed_attempts(db, job_type, target, ended_ago: list[timedelta]):
    for ago in ended_ago:
        db.job(
            job_type,
            target,
            FAILED,
            created_at=db.now - ago - seconds(30),
            updated_at=db.now - ago,
        )


def retry_ids(
    db, recovery=ORPHAN_SCRAPS, *, grace=ORPHAN_MIN_AGE, max_attempts=10, last_success=None
):
    with db.engine.connect() as conn:
        due = due_retries(
            conn,
            recovery,
            db.now,
            grace=grace,
            max_attempts=max_attempts,
            last_success=last_success or {},
        )
    return due[recovery.id_key].tolist()


def test_a_failed_target_is_retried_once_its_wait_has_passed(san_db):
    user = san_db.user()
    scrap = lambda: san_db.scrap(user, created_at=san_db.ago(minutes=30))  # noqa: E731
    waiting, due_first, second_waiting, due_second = scrap(), scrap(), scrap(), scrap()
    failed_attempts(san_db, CARD_ANALYSIS, waiting, [seconds(3)])  # 1 attempt: due after 5-6 s
    failed_attempts(san_db, CARD_ANALYSIS, due_first, [seconds(8)])
    failed_attempts(san_db, CARD_ANALYSIS, second_waiting, [seconds(60), seconds(8)])  # 10-12.5 s
    failed_attempts(san_db, CARD_ANALYSIS, due_second, [seconds(60), seconds(14)])
    assert sorted(retry_ids(san_db)) == sorted([due_first, due_second])


def test_after_an_outage_a_target_deep_in_its_backoff_is_retried_once_a_job_succeeds(san_db):
    scrap = san_db.scrap(san_db.user(), created_at=san_db.ago(hours=1))
    # six attempts failed during an outage; the next would be ~5 min after the last
    failed_attempts(
        san_db, CARD_ANALYSIS, scrap, [timedelta(minutes=m) for m in (30, 20, 12, 6, 3, 2)]
    )
    assert retry_ids(san_db) == []
    # a CARD_ANALYSIS job succeeded since the last failure: the service works again
    assert retry_ids(san_db, last_success={CARD_ANALYSIS: san_db.ago(seconds=30)}) == [scrap]
    # another job type's success says nothing about this one
    assert retry_ids(san_db, last_success={SCRAP_REFINE: san_db.ago(seconds=30)}) == []
    # and a success before the failure neither
    assert retry_ids(san_db, last_success={CARD_ANALYSIS: san_db.ago(minutes=5)}) == []


def test_no_retry_for_a_target_that_has_its_result_an_active_job_or_its_attempts_used_up(san_db):
    user = san_db.user()
    long_ago = timedelta(minutes=10)
    carded = san_db.scrap(user, created_at=san_db.ago(minutes=30), card=True)
    failed_attempts(san_db, CARD_ANALYSIS, carded, [long_ago])
    active = san_db.scrap(user, created_at=san_db.ago(minutes=30))
    failed_attempts(san_db, CARD_ANALYSIS, active, [long_ago])
    san_db.job(CARD_ANALYSIS, active, PENDING)
    poison = san_db.scrap(user, created_at=san_db.ago(minutes=30))
    failed_attempts(san_db, CARD_ANALYSIS, poison, [long_ago] * 3)
    assert retry_ids(san_db, max_attempts=3) == []


def test_a_failure_past_the_horizon_is_left_to_recovery_job(san_db):
    scrap = san_db.scrap(san_db.user(), created_at=san_db.ago(hours=6))
    failed_attempts(san_db, CARD_ANALYSIS, scrap, [timedelta(hours=4)])
    assert retry_ids(san_db) == []


def test_a_target_the_app_never_enqueued_is_enqueued_right_after_the_grace(san_db):
    user = san_db.user()
    within_grace = san_db.scrap(user, created_at=san_db.now - ORPHAN_MIN_AGE + seconds(20))
    past_grace = san_db.scrap(user, created_at=san_db.now - ORPHAN_MIN_AGE - seconds(20))
    old = san_db.scrap(
        user, created_at=san_db.now - ORPHAN_MIN_AGE - APP_DEATH_CATCH_UP - timedelta(minutes=1)
    )
    assert retry_ids(san_db) == [past_grace]
    assert within_grace and old  # the app may still enqueue the first; recovery_job takes the last
    assert retry_ids(san_db, grace=timedelta(minutes=1)) == [past_grace, within_grace]


def test_every_target_recovery_of_the_registry_is_retried(san_db):
    user = san_db.user()
    unrefined = san_db.scrap(user, created_at=san_db.ago(minutes=30), refined=False, card=True)
    failed_attempts(san_db, SCRAP_REFINE, unrefined, [timedelta(minutes=5)])
    summary = san_db.summary(user, created_at=san_db.ago(minutes=30))
    failed_attempts(san_db, TIL_GENERATION, summary, [timedelta(minutes=5)])
    assert retry_ids(san_db, UNREFINED_SCRAPS) == [unrefined]
    assert retry_ids(san_db, UNWRITTEN_TILS) == [summary]
    assert {recovery.area for recovery in TARGET_RECOVERIES} == {
        ORPHAN_SCRAPS.area,
        UNREFINED_SCRAPS.area,
        UNWRITTEN_TILS.area,
    }


def due(db, recovery=ORPHAN_SCRAPS):
    with db.engine.connect() as conn:
        return due_retries(
            conn, recovery, db.now, grace=ORPHAN_MIN_AGE, max_attempts=10, last_success={}
        )


def retry(db, due_targets, cap=500):
    return recover_targets(
        db.engine,
        Dispatcher(),
        ORPHAN_SCRAPS,
        due_targets,
        now=db.now,
        policy=RecoveryPolicy(max_enqueue_per_run=cap),
        thresholds={},
    )


def test_a_retry_goes_through_the_one_enqueue_path_and_skips_a_target_the_app_enqueued_meanwhile(
    san_db,
):
    user = san_db.user()
    healed, raced = (san_db.scrap(user, created_at=san_db.ago(minutes=30)) for _ in range(2))
    failed_attempts(san_db, CARD_ANALYSIS, healed, [timedelta(minutes=3)])
    failed_attempts(san_db, CARD_ANALYSIS, raced, [timedelta(minutes=3)])
    due_targets = due(san_db)
    app_job = san_db.job(CARD_ANALYSIS, raced, PENDING)
    report = retry(san_db, due_targets)
    assert (report.enqueued, report.skipped_by_race) == (1, 1)
    active = san_db.jobs(status=PENDING)
    assert sorted((j.target_id, j.id == app_job) for j in active) == sorted(
        [(healed, False), (raced, True)]
    )
    assert [round(age) for age in report.heal_ages_seconds] == [180]
    merged = retries_metadata([report])
    assert merged["enqueued"] == 1 and merged["recovered"][0]["area"] == ORPHAN_SCRAPS.area
    assert merged["heal_age_median_seconds"] == pytest.approx(180, abs=2)


def test_the_cap_per_run_takes_the_oldest_and_the_next_runs_reach_every_target(san_db):
    user = san_db.user()
    scraps = [san_db.scrap(user, created_at=san_db.ago(minutes=30)) for _ in range(5)]
    for minutes_ago, scrap in zip(range(10, 5, -1), scraps, strict=True):
        failed_attempts(san_db, CARD_ANALYSIS, scrap, [timedelta(minutes=minutes_ago)])
    healed_per_run = []
    for _run in range(3):  # ceil(5 / 2) runs
        report = retry(san_db, due(san_db), cap=2)
        healed_per_run.append([pair["scrap_id"] for pair in report.recovered])
    assert healed_per_run == [scraps[:2], scraps[2:4], scraps[4:]]  # oldest first, none starved
    assert due(san_db).empty


def test_the_lane_and_a_recovery_job_run_on_the_same_target_give_it_one_active_job(san_db):
    scrap = san_db.scrap(san_db.user(), created_at=san_db.ago(hours=3))
    failed_attempts(san_db, CARD_ANALYSIS, scrap, [timedelta(minutes=3)])
    due_targets = due(san_db)
    result, _instance = run_recovery(san_db)  # the 2-hourly run heals the same orphan first
    assert result.success
    report = retry(san_db, due_targets)
    assert (report.enqueued, report.skipped_by_race) == (0, 1)
    assert len(san_db.jobs(status=PENDING, target_id=scrap)) == 1
