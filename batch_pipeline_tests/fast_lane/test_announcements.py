"""Lost events (announcements.py): the threshold follows the workers, the steps are a fixed grid,
each step fires once, and a re-announcement counts only what was delivered."""

from datetime import timedelta

import pandas as pd
from sqlalchemy import update

from batch_pipeline.fast_lane.announcements import (
    GRID,
    LONGEST_WINDOW,
    MIN_CLAIM_SAMPLES,
    REANNOUNCE_FLOOR,
    LaneWindow,
    announcement_ages,
    claim_stats,
    due_announcements,
    reannounce,
    threshold_for,
)
from batch_pipeline.recovery.ghost_jobs import STALE_PENDING_AFTER
from batch_pipeline.san.dispatch import PgNotifyDispatcher, RedisStreamDispatcher
from batch_pipeline.san.tables import CARD_ANALYSIS, COMPLETED, PROCESSING, SCRAP_REFINE, jobs
from batch_pipeline_tests.conftest import job_notifications

seconds = lambda s: timedelta(seconds=s)  # noqa: E731


def test_the_threshold_is_twice_the_claim_p99_rounded_up_to_the_grid_never_below_the_floor():
    assert threshold_for(None) == REANNOUNCE_FLOOR == seconds(10)
    assert threshold_for(seconds(0.3)) == seconds(10)  # workers that claim at once
    assert threshold_for(seconds(7)) == seconds(20)  # 14 s -> the next step
    assert threshold_for(seconds(20)) == seconds(40)  # the slow-worker world
    assert threshold_for(timedelta(hours=5)) < STALE_PENDING_AFTER  # never past the ghost rule


def test_the_steps_are_the_grids_from_the_threshold_on_before_the_ghost_rule():
    assert GRID == tuple(seconds(10 * 2**k) for k in range(8))  # 10 s .. 1280 s
    assert announcement_ages(seconds(10)) == list(GRID)
    assert announcement_ages(seconds(40)) == list(GRID[2:])
    assert announcement_ages(seconds(10), stale_pending_after=timedelta(minutes=5)) == list(
        GRID[:5]
    )


def due_ids(db, window, threshold=REANNOUNCE_FLOOR):
    with db.engine.connect() as conn:
        return due_announcements(conn, window, announcement_ages(threshold))["job_id"].tolist()


def test_a_job_is_due_when_its_age_crosses_a_step_inside_the_window(san_db):
    now = san_db.now
    window = LaneWindow(since=now - seconds(5), until=now)
    scrap = san_db.scrap(san_db.user())
    crossed_10_s = san_db.job(CARD_ANALYSIS, scrap, created_at=now - seconds(12))
    san_db.job(CARD_ANALYSIS, scrap, created_at=now - seconds(30))  # between steps: not now
    crossed_80_s = san_db.job(SCRAP_REFINE, scrap, created_at=now - seconds(83))
    san_db.job(CARD_ANALYSIS, scrap, PROCESSING, created_at=now - seconds(12))  # a worker has it
    san_db.job(CARD_ANALYSIS, scrap, created_at=now - seconds(3))  # younger than the first step
    san_db.job(CARD_ANALYSIS, scrap, created_at=now - STALE_PENDING_AFTER - seconds(3))  # a ghost
    assert due_ids(san_db, window) == [crossed_80_s, crossed_10_s]
    assert due_ids(san_db, window, threshold=seconds(40)) == [crossed_80_s]


def test_back_to_back_windows_announce_each_step_once_whatever_the_threshold_does(san_db):
    created = san_db.now - timedelta(hours=1)
    job = san_db.job(CARD_ANALYSIS, san_db.scrap(san_db.user()), created_at=created)
    heard_at, until, previous = [], created, None
    thresholds = [seconds(10), seconds(40), seconds(20), seconds(10), seconds(80)]
    tick = 0
    while until < created + STALE_PENDING_AFTER + timedelta(minutes=5):
        until += seconds(5.3)  # ticks about 5 s apart, never exactly
        window = LaneWindow.after_window(previous, until, first=seconds(5))
        previous = window.until
        threshold = thresholds[(tick // 40) % len(thresholds)]  # changes every ~3.5 min
        tick += 1
        if due_ids(san_db, window, threshold) == [job]:
            heard_at.append(until - created)
    steps = [next(step for step in GRID if step <= age < step + seconds(5.3)) for age in heard_at]
    assert steps == sorted(set(steps))  # each step at most once, in order
    assert len(heard_at) <= len(GRID) and all(age < STALE_PENDING_AFTER for age in heard_at)


def test_a_window_after_a_long_pause_reaches_back_no_further_than_the_longest_window(san_db):
    now = san_db.now
    window = LaneWindow.after_window(now - timedelta(hours=5), now, first=seconds(5))
    assert now - window.since == LONGEST_WINDOW and window.until == now
    assert LaneWindow.after_window(None, now, first=seconds(5)).since == now - seconds(5)


def test_reannouncing_sends_the_same_job_id_again_and_leaves_the_row_unchanged(pg_db):
    scrap = pg_db.scrap(pg_db.user())
    unclaimed = pg_db.job(CARD_ANALYSIS, scrap, created_at=pg_db.now - seconds(12))
    claimed = pg_db.job(SCRAP_REFINE, scrap, created_at=pg_db.now - seconds(12))
    window = LaneWindow(since=pg_db.now - seconds(5), until=pg_db.now)
    with pg_db.engine.connect() as conn:  # closed at once: an open transaction blocks the drop
        due = due_announcements(conn, window, announcement_ages(REANNOUNCE_FLOOR))
    with pg_db.engine.begin() as conn:  # a worker claims one between the probe and now
        conn.execute(update(jobs).where(jobs.c.id == claimed).values(status=PROCESSING))
    before = pg_db.get_job(unclaimed)
    with job_notifications(pg_db) as heard:
        report = reannounce(pg_db.engine, PgNotifyDispatcher(heard.channel), due, pg_db.now)
    assert heard == [{"job_id": unclaimed, "job_type": CARD_ANALYSIS, "target_id": scrap}]
    assert pg_db.get_job(unclaimed) == before
    assert (report.announced, report.claimed_meanwhile, report.announced_ids) == (1, 1, [unclaimed])
    assert 11 <= report.heal_ages_seconds[0] <= 20
    assert report.metadata()["heal_age_max_seconds"] == report.heal_ages_seconds[0]


def test_with_redis_down_nothing_counts_as_announced(san_db):
    jobs_ = [
        san_db.job(CARD_ANALYSIS, target, created_at=san_db.now - seconds(12))
        for target in range(5)
    ]
    window = LaneWindow(since=san_db.now - seconds(5), until=san_db.now)
    with san_db.engine.connect() as conn:
        due = due_announcements(conn, window, announcement_ages(REANNOUNCE_FLOOR))
    down = RedisStreamDispatcher("redis://127.0.0.1:9/0", timeout_s=0.5)  # nothing listens there
    report = reannounce(san_db.engine, down, due, san_db.now)
    assert len(due) == len(jobs_) == 5
    assert (report.announced, report.announce_failures, report.announced_ids) == (0, 5, [])


def test_claim_latencies_leave_out_the_jobs_announced_again_and_say_when_each_type_last_succeeded(
    san_db,
):
    now = san_db.now
    quick = []
    for number in range(MIN_CLAIM_SAMPLES + 5):
        created = now - timedelta(minutes=5) + seconds(number)
        quick.append(
            san_db.job(
                CARD_ANALYSIS,
                number,
                COMPLETED,
                created_at=created,
                started_at=created + seconds(2),
                updated_at=created + seconds(3),
            )
        )
    reannounced = san_db.job(
        SCRAP_REFINE,
        1,
        PROCESSING,
        created_at=now - timedelta(minutes=4),
        started_at=now - timedelta(minutes=2),
    )
    with san_db.engine.connect() as conn:
        stats = claim_stats(conn, now, excluded_ids={reannounced})
        with_it = claim_stats(conn, now)
    assert stats.claims == len(quick) and abs(stats.p99 - seconds(2)) < seconds(0.01)
    assert with_it.claims == len(quick) + 1 and with_it.p99 > seconds(30)
    last = pd.Timestamp(stats.last_success[CARD_ANALYSIS])
    assert last == pd.Timestamp(now - timedelta(minutes=5) + seconds(len(quick) - 1 + 3))
    assert SCRAP_REFINE not in stats.last_success  # none succeeded


def test_too_few_claims_give_no_estimate(san_db):
    created = san_db.now - timedelta(minutes=1)
    san_db.job(CARD_ANALYSIS, 1, COMPLETED, created_at=created, started_at=created + seconds(1))
    with san_db.engine.connect() as conn:
        stats = claim_stats(conn, san_db.now)
    assert stats.claims == 1 and stats.p99 is None
