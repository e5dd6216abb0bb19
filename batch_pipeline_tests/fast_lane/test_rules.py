"""The fast lane's rules (rules.py), as plain functions on SQLite and PostgreSQL."""

from datetime import timedelta

import pytest
from sqlalchemy import update

from batch_pipeline.fast_lane.rules import (
    APP_DEATH_CATCH_UP,
    PROBE_INTERVAL,
    REANNOUNCE_AFTER,
    LaneSettings,
    LaneWindow,
    announcement_ages,
    due_announcements,
    due_retries,
    probe,
    reannounce,
    retries_metadata,
    retry,
)
from batch_pipeline.recovery.ghost_jobs import STALE_PENDING_AFTER
from batch_pipeline.recovery.orphan_scraps import ORPHAN_SCRAPS
from batch_pipeline.recovery.registry import TARGET_RECOVERIES
from batch_pipeline.recovery.targets import ORPHAN_MIN_AGE
from batch_pipeline.recovery.unrefined_scraps import UNREFINED_SCRAPS
from batch_pipeline.recovery.unwritten_tils import UNWRITTEN_TILS
from batch_pipeline.san.dispatch import Dispatcher, PgNotifyDispatcher
from batch_pipeline.san.tables import (
    CARD_ANALYSIS,
    FAILED,
    PENDING,
    PROCESSING,
    SCRAP_REFINE,
    TIL_GENERATION,
    jobs,
)
from batch_pipeline_tests.conftest import job_notifications
from batch_pipeline_tests.runs import run_recovery

SETTINGS = LaneSettings()


def test_an_unclaimed_job_is_announced_at_1_2_4_8_16_minutes_before_the_ghost_rule_takes_it():
    assert announcement_ages() == [REANNOUNCE_AFTER * k for k in (1, 2, 4, 8, 16)]
    assert all(age < STALE_PENDING_AFTER for age in announcement_ages())
    # a shorter ghost rule cuts the schedule, never the other way round
    assert announcement_ages(stale_pending_after=timedelta(minutes=10)) == [
        REANNOUNCE_AFTER * k for k in (1, 2, 4, 8)
    ]


def due_ids(db, window):
    with db.engine.connect() as conn:
        return due_announcements(conn, window, SETTINGS)["job_id"].tolist()


def test_a_job_is_due_when_its_age_crosses_a_step_inside_the_window(san_db):
    now = san_db.now
    window = LaneWindow(since=now - PROBE_INTERVAL, until=now)
    user = san_db.user()
    scrap = san_db.scrap(user)
    crossed_1_min = san_db.job(CARD_ANALYSIS, scrap, created_at=now - timedelta(seconds=70))
    # between steps: not now
    san_db.job(CARD_ANALYSIS, scrap, created_at=now - timedelta(seconds=100))
    crossed_4_min = san_db.job(SCRAP_REFINE, scrap, created_at=now - timedelta(seconds=245))
    # a worker has it
    san_db.job(CARD_ANALYSIS, scrap, PROCESSING, created_at=now - timedelta(seconds=70))
    # younger than the first step
    san_db.job(CARD_ANALYSIS, scrap, created_at=now - timedelta(seconds=20))
    # a ghost
    san_db.job(CARD_ANALYSIS, scrap, created_at=now - STALE_PENDING_AFTER - timedelta(seconds=10))
    assert due_ids(san_db, window) == [crossed_4_min, crossed_1_min]


def test_back_to_back_windows_announce_a_job_once_per_step_and_never_after_the_ghost_rule(san_db):
    created = san_db.now - timedelta(hours=1)
    job = san_db.job(CARD_ANALYSIS, san_db.scrap(san_db.user()), created_at=created)
    announced_at, until, cursor = [], created, None
    while until < created + STALE_PENDING_AFTER + timedelta(minutes=5):
        until += timedelta(seconds=33)  # ticks are at least 30 s apart, never exactly
        window = LaneWindow.after(cursor, until)
        cursor = window.until
        if due_ids(san_db, window) == [job]:
            announced_at.append(until - created)
    assert len(announced_at) == 5  # with the app's own announcement: 6 in all
    assert [
        step <= age < step + timedelta(seconds=33)
        for step, age in zip(announcement_ages(), announced_at, strict=True)
    ] == [True] * 5


def test_a_window_after_a_long_pause_reaches_back_no_further_than_the_longest_window(san_db):
    now = san_db.now
    window = LaneWindow.after(now - timedelta(hours=5), now)
    assert now - window.since == timedelta(minutes=20) and window.until == now


def test_reannouncing_sends_the_same_job_id_again_and_leaves_the_row_unchanged(pg_db):
    scrap = pg_db.scrap(pg_db.user())
    unclaimed = pg_db.job(CARD_ANALYSIS, scrap, created_at=pg_db.now - timedelta(seconds=70))
    claimed = pg_db.job(SCRAP_REFINE, scrap, created_at=pg_db.now - timedelta(seconds=70))
    window = LaneWindow(since=pg_db.now - PROBE_INTERVAL, until=pg_db.now)
    # closed at once: an open transaction would block the schema's drop
    with pg_db.engine.connect() as conn:
        due = due_announcements(conn, window, SETTINGS)
    with pg_db.engine.begin() as conn:  # a worker claims one between the probe and the announcement
        conn.execute(update(jobs).where(jobs.c.id == claimed).values(status=PROCESSING))
    before = pg_db.get_job(unclaimed)
    with job_notifications(pg_db) as heard:
        report = reannounce(pg_db.engine, PgNotifyDispatcher(heard.channel), due, pg_db.now)
    assert heard == [{"job_id": unclaimed, "job_type": CARD_ANALYSIS, "target_id": scrap}]
    assert pg_db.get_job(unclaimed) == before
    assert (report.announced, report.claimed_meanwhile, report.announced_ids) == (1, 1, [unclaimed])
    assert 69 <= report.heal_ages_seconds[0] <= 80
    assert report.metadata()["heal_age_max_seconds"] == report.heal_ages_seconds[0]


def test_with_reannouncing_off_nothing_is_due(san_db):
    san_db.job(
        CARD_ANALYSIS, san_db.scrap(san_db.user()), created_at=san_db.now - timedelta(seconds=70)
    )
    window = LaneWindow(since=san_db.now - PROBE_INTERVAL, until=san_db.now)
    with san_db.engine.connect() as conn:
        assert due_announcements(conn, window, LaneSettings(reannounce=False)).empty


def retry_ids(db, recovery=ORPHAN_SCRAPS, settings=SETTINGS):
    with db.engine.connect() as conn:
        return due_retries(conn, recovery, db.now, settings)[recovery.id_key].tolist()


def failed_attempts(db, job_type, target, ended_ago: list[timedelta]):
    for ago in ended_ago:
        db.job(
            job_type,
            target,
            FAILED,
            created_at=db.now - ago - timedelta(seconds=30),
            updated_at=db.now - ago,
        )


def test_a_failed_target_is_retried_after_a_backoff_that_doubles_with_its_attempts(san_db):
    user = san_db.user()
    seconds = lambda s: timedelta(seconds=s)  # noqa: E731
    waiting = san_db.scrap(user, created_at=san_db.ago(minutes=30))
    failed_attempts(san_db, CARD_ANALYSIS, waiting, [seconds(30)])  # 1 attempt: due 1 min after it
    due_first = san_db.scrap(user, created_at=san_db.ago(minutes=30))
    failed_attempts(san_db, CARD_ANALYSIS, due_first, [seconds(70)])
    # 2 attempts: due 2 min after
    second_waiting = san_db.scrap(user, created_at=san_db.ago(minutes=30))
    failed_attempts(san_db, CARD_ANALYSIS, second_waiting, [seconds(400), seconds(90)])
    due_second = san_db.scrap(user, created_at=san_db.ago(minutes=30))
    failed_attempts(san_db, CARD_ANALYSIS, due_second, [seconds(400), seconds(150)])
    assert sorted(retry_ids(san_db)) == sorted([due_first, due_second])
    # a longer first wait shifts the whole schedule
    assert retry_ids(san_db, settings=LaneSettings(retry_after=seconds(72))) == [due_second]


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
    assert retry_ids(san_db, settings=LaneSettings(max_attempts=3)) == []


def test_a_failure_past_the_horizon_is_left_to_recovery_job(san_db):
    scrap = san_db.scrap(san_db.user(), created_at=san_db.ago(hours=6))
    failed_attempts(san_db, CARD_ANALYSIS, scrap, [timedelta(hours=4)])
    assert retry_ids(san_db) == []


def test_a_target_the_app_never_enqueued_is_enqueued_right_after_the_grace(san_db):
    user = san_db.user()
    within_grace = san_db.scrap(
        user, created_at=san_db.now - ORPHAN_MIN_AGE + timedelta(seconds=20)
    )
    past_grace = san_db.scrap(user, created_at=san_db.now - ORPHAN_MIN_AGE - timedelta(seconds=20))
    old = san_db.scrap(
        user, created_at=san_db.now - ORPHAN_MIN_AGE - APP_DEATH_CATCH_UP - timedelta(minutes=1)
    )
    assert retry_ids(san_db) == [past_grace]
    assert within_grace and old  # the app may still enqueue the first; recovery_job takes the last
    assert retry_ids(san_db, settings=LaneSettings(orphan_min_age=timedelta(minutes=1))) == [
        past_grace,
        within_grace,
    ]


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


def test_a_retry_goes_through_the_one_enqueue_path_and_skips_a_target_the_app_enqueued_meanwhile(
    san_db,
):
    user = san_db.user()
    healed, raced = (san_db.scrap(user, created_at=san_db.ago(minutes=30)) for _ in range(2))
    failed_attempts(san_db, CARD_ANALYSIS, healed, [timedelta(minutes=3)])
    failed_attempts(san_db, CARD_ANALYSIS, raced, [timedelta(minutes=3)])
    with san_db.engine.connect() as conn:
        due = due_retries(conn, ORPHAN_SCRAPS, san_db.now, SETTINGS)
    app_job = san_db.job(CARD_ANALYSIS, raced, PENDING)
    report = retry(san_db.engine, Dispatcher(), ORPHAN_SCRAPS, due, san_db.now, SETTINGS)
    assert (report.enqueued, report.skipped_by_race) == (1, 1)
    active = san_db.jobs(status=PENDING)
    assert sorted((j.target_id, j.id == app_job) for j in active) == sorted(
        [(healed, False), (raced, True)]
    )
    assert [round(age) for age in report.heal_ages_seconds] == [180]
    merged = retries_metadata([report])
    assert merged["enqueued"] == 1 and merged["recovered"][0]["area"] == ORPHAN_SCRAPS.area
    assert merged["heal_age_median_seconds"] == pytest.approx(180, abs=2)


def test_a_retry_storm_is_capped_per_tick_oldest_first(san_db):
    user = san_db.user()
    scraps = [san_db.scrap(user, created_at=san_db.ago(minutes=30)) for _ in range(5)]
    for minutes_ago, scrap in zip(range(10, 5, -1), scraps, strict=True):
        failed_attempts(san_db, CARD_ANALYSIS, scrap, [timedelta(minutes=minutes_ago)])
    settings = LaneSettings(max_enqueue_per_tick=2)
    with san_db.engine.connect() as conn:
        due = due_retries(conn, ORPHAN_SCRAPS, san_db.now, settings)
    report = retry(san_db.engine, Dispatcher(), ORPHAN_SCRAPS, due, san_db.now, settings)
    assert [pair["scrap_id"] for pair in report.recovered] == scraps[:2]
    assert report.deferred == 3


def test_the_probe_counts_what_a_run_would_heal_and_nothing_else(san_db):
    now = san_db.now
    window = LaneWindow(since=now - PROBE_INTERVAL, until=now)
    with san_db.engine.connect() as conn:
        empty = probe(conn, window, SETTINGS, TARGET_RECOVERIES)
    assert not empty.anything_to_heal and "0 jobs to re-announce" in empty.summary()
    scrap = san_db.scrap(san_db.user(), created_at=san_db.ago(minutes=30))
    failed_attempts(san_db, CARD_ANALYSIS, scrap, [timedelta(minutes=3)])
    san_db.job(SCRAP_REFINE, scrap, created_at=now - timedelta(seconds=70))
    with san_db.engine.connect() as conn:
        found = probe(conn, window, SETTINGS, TARGET_RECOVERIES)
    assert found.anything_to_heal and found.announcements == 1
    assert found.retries == {
        ORPHAN_SCRAPS.area: 1,
        UNREFINED_SCRAPS.area: 0,
        UNWRITTEN_TILS.area: 0,
    }


def test_the_lane_and_a_recovery_job_run_on_the_same_target_give_it_one_active_job(san_db):

    scrap = san_db.scrap(san_db.user(), created_at=san_db.ago(hours=3))
    failed_attempts(san_db, CARD_ANALYSIS, scrap, [timedelta(minutes=3)])
    with san_db.engine.connect() as conn:
        due = due_retries(conn, ORPHAN_SCRAPS, san_db.now, SETTINGS)
    result, _instance = run_recovery(san_db)  # the 2-hourly run heals the same orphan first
    assert result.success
    report = retry(san_db.engine, Dispatcher(), ORPHAN_SCRAPS, due, san_db.now, SETTINGS)
    assert (report.enqueued, report.skipped_by_race) == (0, 1)
    assert len(san_db.jobs(status=PENDING, target_id=scrap)) == 1
