"""One tick of the lane (tick.py), without Dagster: the cursor's state, the cap that resumes
where it stopped, the threshold that follows the claims."""

from datetime import timedelta

from batch_pipeline.fast_lane.announcements import ESTIMATE_EVERY, REANNOUNCE_FLOOR, LaneWindow
from batch_pipeline.fast_lane.tick import LaneSettings, LaneState, lane_tick
from batch_pipeline.recovery.registry import TARGET_RECOVERIES
from batch_pipeline.san.dispatch import Dispatcher, PgNotifyDispatcher
from batch_pipeline.san.tables import CARD_ANALYSIS, COMPLETED, FAILED
from batch_pipeline_tests.conftest import job_notifications

seconds = lambda s: timedelta(seconds=s)  # noqa: E731


def test_the_state_survives_its_cursor(san_db):
    now = san_db.now
    state = LaneState(
        until=now,
        resume=LaneWindow(since=now - seconds(5), until=now, after=(now - seconds(12), 41)),
        round=7,
        threshold=seconds(40),
        claim_p99=seconds(17.5),
        claims=120,
        estimated_at=now,
        last_success={CARD_ANALYSIS: now - seconds(3)},
        reannounced={5: now.timestamp()},
    )
    assert LaneState.from_json(state.to_json()) == state
    assert LaneState.from_json(None) == LaneState()
    # a cursor of the version before (the window's end only) keeps the window
    assert LaneState.from_json('{"until": "2026-12-01T00:00:00+00:00"}').until.year == 2026


def unclaimed_jobs(db, count, age=timedelta(seconds=12)):
    """`count` PENDING jobs that all crossed the 10 s step within the last seconds."""
    return [db.job(CARD_ANALYSIS, 10_000 + n, created_at=db.now - age) for n in range(count)]


def test_a_capped_tick_resumes_where_it_stopped_and_every_job_is_reached_once(pg_db):
    jobs_ = unclaimed_jobs(pg_db, 25)
    settings = LaneSettings(max_announcements=10)
    state, heard_per_tick, left = LaneState(until=pg_db.now - seconds(5)), [], []
    with job_notifications(pg_db) as heard:
        dispatcher = PgNotifyDispatcher(heard.channel)
        for _ in range(4):
            tick = lane_tick(pg_db.engine, dispatcher, state, settings, [])
            state = tick.state
            heard_per_tick.append(tick.announcements.announced_ids)
            left.append(tick.announcements.left_for_next_tick)
    assert [len(ids) for ids in heard_per_tick] == [10, 10, 5, 0]
    assert left == [15, 5, 0, 0]
    assert sorted(id_ for ids in heard_per_tick for id_ in ids) == sorted(jobs_)  # each once
    assert sorted(event["job_id"] for event in heard) == sorted(jobs_)
    assert state.resume is None and state.round == 3


def test_the_threshold_follows_how_fast_workers_claim(san_db):
    created = san_db.now - timedelta(minutes=5)
    for number in range(30):  # slow workers: claims 15 s after the event
        san_db.job(
            CARD_ANALYSIS,
            number,
            COMPLETED,
            created_at=created + seconds(number),
            started_at=created + seconds(number + 15),
            updated_at=created + seconds(number + 16),
        )
    tick = lane_tick(san_db.engine, Dispatcher(), LaneState(), LaneSettings(), [])
    assert tick.state.threshold == seconds(40)  # 2 x 15 s, up to the grid
    assert abs(tick.state.claim_p99 - seconds(15)) < seconds(0.01)
    assert tick.state.last_success[CARD_ANALYSIS] is not None
    # not read again before ESTIMATE_EVERY
    again = lane_tick(san_db.engine, Dispatcher(), tick.state, LaneSettings(), [])
    assert again.state.estimated_at == tick.state.estimated_at
    assert ESTIMATE_EVERY > seconds(5)


def test_without_announcements_nothing_is_announced_but_retries_are_counted(san_db):
    unclaimed_jobs(san_db, 3)
    scrap = san_db.scrap(san_db.user(), created_at=san_db.ago(minutes=30))
    san_db.job(
        CARD_ANALYSIS,
        scrap,
        FAILED,
        created_at=san_db.ago(minutes=4),
        updated_at=san_db.ago(minutes=3),
    )
    for settings in (LaneSettings(reannounce=False), LaneSettings()):  # off; or dispatcher none
        tick = lane_tick(san_db.engine, Dispatcher(), LaneState(), settings, TARGET_RECOVERIES)
        assert tick.announcements.detected == 0 and tick.ages == []
        assert tick.retries["orphan_scrap_recovery"] == 1 and tick.retries_due == 1
        # the tick says it does not re-announce, not the threshold it does not use
        assert not tick.state.reannouncing
        assert "re-announcing off" in tick.summary() and "after" not in tick.summary()
        assert not LaneState.from_json(tick.state.to_json()).reannouncing
    assert "targets to retry or enqueue: orphan_scrap_recovery 1" in tick.summary()


def test_the_lane_remembers_the_jobs_it_announced_again_to_leave_them_out_of_the_sample(pg_db):
    [job] = unclaimed_jobs(pg_db, 1)
    with job_notifications(pg_db) as heard:
        tick = lane_tick(
            pg_db.engine,
            PgNotifyDispatcher(heard.channel),
            LaneState(until=pg_db.now - seconds(5)),
            LaneSettings(),
            [],
        )
    assert tick.announcements.announced_ids == [job] and job in tick.state.reannounced
    assert tick.state.threshold == REANNOUNCE_FLOOR
