"""The throttle's law on simulated signals (no database, no timing): full speed on a quiet
database, small batches and long rests while the app works, longer as its transactions slow
down, the least writing that still progresses
when critical, a rest from the batch's own work (never a lock wait), back to full speed when
quiet again, no flapping; the runtime's rests react to readings taken during them."""

import threading
from dataclasses import replace

import pytest

from batch_pipeline.recovery.jobs import RECOVERY_TAGS
from batch_pipeline.san.throttle import (
    APP_BATCH_SECONDS,
    BUSY,
    BUSY_REST_RATIO,
    CRITICAL,
    CRITICAL_REST,
    FALLBACK_REST_RATIO,
    MAX_BATCH,
    MAX_REST_RATIO,
    MIN_BATCH,
    QUIET,
    REACT_EVERY,
    START_BATCH,
    TARGET_BATCH_SECONDS,
    Overrides,
    Signals,
    Throttle,
    ThrottleState,
    aggregate,
    decide,
    learned_baseline,
)

QUIET_COMMIT = 0.001
ROW_COST = 0.0001  # seconds per row: 2,500 rows make TARGET_BATCH_SECONDS


def signals(
    slowdown: float = 1.0,
    active: int = 0,
    blocked: int = 0,
    lag=None,
    at_work: int = 0,
    unseen: int = 0,
) -> Signals:
    return Signals(
        probe_seconds=QUIET_COMMIT * slowdown,
        active_app_sessions=active,
        blocked_by_us=blocked,
        replica_lag_seconds=lag,
        cores=4,
        app_sessions_at_work=at_work,
        app_sessions_unseen=unseen,
    )


def app_slowed(slowdown: float) -> Signals:
    """The app at work, its transactions `slowdown` times slower than quiet."""
    return signals(slowdown=slowdown, at_work=1)


def run(state: ThrottleState, readings, overrides=Overrides()):
    """Batches written at ROW_COST per row under `readings`, one per batch: each step."""
    steps = []
    for reading in readings:
        step = decide(state, reading, state.batch_size, state.batch_size * ROW_COST, overrides)
        steps.append(step)
        state = step.state
    return steps


def learned() -> ThrottleState:
    return ThrottleState(baseline=QUIET_COMMIT)


def test_a_quiet_database_gets_no_rest_and_batches_of_the_target_time():
    steps = run(learned(), [signals()] * 12)
    assert all(step.rest_seconds == 0 and step.state.zone == QUIET for step in steps)
    sizes = [step.state.batch_size for step in steps]
    assert sizes == sorted(sizes)  # grows, at most x2 a batch
    assert sizes[-1] * ROW_COST == TARGET_BATCH_SECONDS
    assert all(b <= a * 2 for a, b in zip([START_BATCH, *sizes], sizes, strict=False))


APP_SIZED = int(APP_BATCH_SECONDS / ROW_COST)  # a busy batch's rows: 200


def test_slower_commits_shrink_the_batch_and_rest_longer_the_slower_they_get():
    quiet = ThrottleState(baseline=QUIET_COMMIT, seconds_per_row=ROW_COST, batch_size=2_500)
    busy = run(quiet, [app_slowed(2.0)] * 6)
    slower = run(quiet, [app_slowed(3.5)] * 6)
    assert [s.state.zone for s in busy] == [BUSY] * 6
    # APP_BATCH_SECONDS of work at once, then holding there: never down to MIN_BATCH
    assert [s.state.batch_size for s in busy] == [APP_SIZED] * 6
    work = busy[-1].state.batch_size * ROW_COST
    assert work < busy[-1].rest_seconds < MAX_REST_RATIO * work
    assert slower[-1].rest_seconds > busy[-1].rest_seconds


def test_a_busy_batch_is_its_aims_busy_work_so_a_detection_s_chunk_can_be_shorter():
    quiet = ThrottleState(baseline=QUIET_COMMIT, seconds_per_row=ROW_COST, batch_size=2_500)
    shorter = replace(quiet, busy_seconds=APP_BATCH_SECONDS / 4)
    writes, reads = run(quiet, [app_slowed(1.0)] * 3), run(shorter, [app_slowed(1.0)] * 3)
    assert [s.state.batch_size for s in writes] == [APP_SIZED] * 3
    assert [s.state.batch_size for s in reads] == [APP_SIZED // 4] * 3
    # the rest follows the work: a quarter of the batch, a quarter of the rest
    assert reads[-1].rest_seconds == pytest.approx(writes[-1].rest_seconds / 4)


def test_under_overload_the_floor_is_a_write_batch_s_work_whatever_the_aims_busy_work():
    """A floor of 5 ms chunks CRITICAL_REST apart would make a saturated sweep about 4x as
    long; 3 s apart, a write batch's work holds a core for a small share of the time."""
    shorter = ThrottleState(
        baseline=QUIET_COMMIT,
        seconds_per_row=ROW_COST,
        batch_size=APP_SIZED // 4,
        busy_seconds=APP_BATCH_SECONDS / 4,
    )
    steps = run(shorter, [app_slowed(5)] * 4)
    assert all(step.state.zone == CRITICAL for step in steps)
    assert [step.state.batch_size for step in steps] == [APP_SIZED // 2] + [APP_SIZED] * 3


def test_busy_after_critical_grows_back_to_its_size_at_most_doubling():
    steps = run(learned(), [signals(blocked=1)] + [signals(at_work=2)] * 6)
    sizes = [step.state.batch_size for step in steps]
    assert sizes == [MIN_BATCH, 20, 40, 80, 160, APP_SIZED, APP_SIZED]


def test_an_app_held_by_our_locks_or_a_replica_behind_gets_the_smallest_batches():
    for reading in (signals(blocked=1), signals(lag=60.0), signals(slowdown=5, blocked=1)):
        [step] = run(learned(), [reading])
        assert step.state.zone == CRITICAL, reading
        assert (step.state.batch_size, step.rest_seconds) == (MIN_BATCH, CRITICAL_REST)
    assert "wait for our locks" in run(learned(), [signals(blocked=2)])[0].state.reason


def test_sustained_overload_keeps_a_floor_that_heals_a_default_run_within_max_runtime():
    """Probes CRITICAL_AT times quiet, or the app's sessions far past the cores, for good: busy
    batches CRITICAL_REST apart. The smallest batch there (10 rows every 3 s) took 6,000 s for
    a default run's 20,000 targets: past max_runtime, cancelled half-healed."""
    max_runtime = float(RECOVERY_TAGS["dagster/max_runtime"])
    for reading in (app_slowed(5), signals(active=9)):
        state, healed, seconds = learned(), 0, 0.0
        while healed < 20_000:
            [step] = run(state, [reading])
            healed += state.batch_size
            seconds += state.batch_size * ROW_COST + step.rest_seconds
            assert step.state.zone == CRITICAL and step.rest_seconds == CRITICAL_REST
            assert MIN_BATCH < step.state.batch_size <= APP_SIZED
            state = step.state
        assert seconds < max_runtime / 4, reading


def test_probes_our_own_batches_slow_with_no_app_at_work_are_not_judged():
    """Alone on the database our writes slow the probe 2-5x: judged, an idle run rested 6x
    longer than it wrote. Sessions our role cannot see might be the app's: judged then."""
    alone = run(learned(), [signals(slowdown=5)] * 6)
    assert all(step.state.zone == QUIET and step.rest_seconds == 0 for step in alone)
    assert "probes 5.0x quiet" in alone[-1].state.reason  # said, as read
    [unseen] = run(learned(), [signals(slowdown=5, unseen=2)])
    assert unseen.state.zone == CRITICAL and "2 unseen" in unseen.state.reason
    for emergency in (signals(slowdown=5, blocked=1), signals(slowdown=5, lag=60.0)):
        assert run(learned(), [emergency])[0].state.zone == CRITICAL


def test_a_batch_that_waited_for_a_lock_rests_no_longer_than_one_that_did_not():
    state = ThrottleState(baseline=QUIET_COMMIT, seconds_per_row=ROW_COST, batch_size=100)
    plain = decide(state, app_slowed(2.0), 100, 100 * ROW_COST)
    waited = decide(state, app_slowed(2.0), 100, 100 * ROW_COST + 4.0)
    assert waited.rest_seconds <= plain.rest_seconds * 2
    assert waited.state.seconds_per_row == ROW_COST  # the wait is not learned as its cost


def test_back_to_quiet_it_is_at_full_speed_within_a_few_batches_and_does_not_flap():
    steps = run(learned(), [app_slowed(5)] * 5 + [signals()] * 12)
    after = steps[6:]  # the second quiet reading: a reading is judged by a median of three
    assert all(step.state.zone == QUIET and step.rest_seconds == 0 for step in after)
    full = next(i for i, step in enumerate(after) if step.state.batch_size * ROW_COST >= 0.2)
    assert full <= 8  # ~8 batches of under 0.25 s: well within 10 s
    steady = run(learned(), [app_slowed(2.5)] * 20)[5:]
    assert len({(s.state.batch_size, round(s.rest_seconds, 6)) for s in steady}) == 1


def test_without_signals_it_is_the_batch_time_rule_and_an_operator_s_values_hold():
    [step] = run(ThrottleState(), [None])
    assert step.rest_seconds == FALLBACK_REST_RATIO * START_BATCH * ROW_COST
    [fixed] = run(learned(), [signals()], Overrides(batch_size=777, rest_ratio=2.0))
    assert fixed.state.batch_size == 777
    assert fixed.rest_seconds == 2.0 * START_BATCH * ROW_COST  # the ratio, on its work
    [critical] = run(learned(), [signals(blocked=1)], Overrides(batch_size=777, rest_ratio=0))
    assert critical.rest_seconds == CRITICAL_REST  # the emergency holds over an override


def test_the_quiet_baseline_is_the_fastest_commit_and_one_slow_fsync_is_noise():
    assert learned_baseline(None, 0.002) == 0.002
    assert learned_baseline(0.002, 0.001) == 0.001
    assert learned_baseline(0.001, 0.010) == 0.001  # sustained load is never learned as quiet
    steps = run(learned(), [signals(), signals(), signals(slowdown=20, unseen=1), signals()])
    assert [step.state.zone for step in steps] == [QUIET] * 4


class Clock:
    def __init__(self):
        self.now = 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_rest_ends_early_when_the_database_quiets_and_stretches_when_critical():
    clock = Clock()
    readings = iter([signals(), app_slowed(3.0), signals(), signals()])
    throttle = Throttle(lambda: next(readings), sleep=clock.sleep)
    assert throttle.next_batch() == START_BATCH  # learns the baseline first
    throttle.written(START_BATCH, 0.5)  # busy: a long rest decided
    assert throttle.rest > 1.0
    throttle.next_batch()
    assert clock.now <= 0.5 + 1e-9  # one nap, then a quiet reading ended the rest
    critical = iter([signals(), signals(blocked=1), signals(blocked=1)] + [signals(blocked=1)] * 20)
    clock = Clock()
    throttle = Throttle(lambda: next(critical), sleep=clock.sleep)
    throttle.next_batch()
    throttle.written(MIN_BATCH, 0.01)
    assert throttle.next_batch() == MIN_BATCH
    assert clock.now >= CRITICAL_REST - 1e-9
    log = throttle.log.metadata()
    assert log["batches_by_zone"] == {CRITICAL: 1} and "wait for our locks" in log["why_it_slowed"]
    assert MAX_BATCH >= START_BATCH


class RestingSampler:
    """A Sampler's face (throttle.Readings) that says, at each of the throttle's naps, whether
    it was told the throttle rests."""

    def __init__(self, readings, clock):
        self.readings, self.fresh, self.taken = readings, threading.Event(), 0
        self.resting, self.naps = False, []
        clock.sleep = lambda seconds: self.naps.append(self.resting)

    def take(self) -> list[Signals]:
        self.taken += 1
        return [next(self.readings)]

    def rest(self, resting: bool) -> None:
        self.resting = resting

    def stop(self) -> None:
        pass


def test_the_sampler_is_told_when_the_throttle_rests_and_when_it_writes_again():
    clock = Clock()
    sampler = RestingSampler(iter([signals()] + [signals(active=2)] * 40), clock)
    throttle = Throttle(lambda: None, sleep=lambda seconds: clock.sleep(seconds), sampler=sampler)
    throttle.next_batch()
    throttle.written(2_000, 2_000 * ROW_COST)  # the app is at work: a busy rest
    throttle.next_batch()
    assert len(sampler.naps) >= 2 and all(sampler.naps)  # fewer readings during it
    assert sampler.resting is False  # the batch written next is read at the writing pace


def test_a_long_busy_rest_keeps_the_batch_it_decided():
    """Each reading of a rest judges the zone only: it halved the next batch again, so a long
    busy rest shrank it to MIN_BATCH."""
    clock = Clock()
    readings = iter([signals()] + [signals(active=2)] * 40)
    throttle = Throttle(lambda: next(readings), sleep=clock.sleep)
    throttle.next_batch()
    throttle.written(2_000, 2_000 * ROW_COST)  # the app is at work: busy
    decided = throttle.state.batch_size
    assert throttle.state.zone == BUSY and throttle.rest >= 4 * REACT_EVERY  # several readings
    assert throttle.next_batch() == decided > MIN_BATCH


def test_the_readings_of_a_batch_are_judged_by_their_slow_tail_and_worst_load():
    samples = [signals()] * 8 + [signals(slowdown=6.0, active=3, blocked=1)] * 2
    judged = aggregate([*samples, signals(at_work=4)])
    assert judged.probe_seconds == QUIET_COMMIT * 6.0  # the 90th percentile: the slow tail
    assert (judged.active_app_sessions, judged.blocked_by_us) == (3, 1)
    assert judged.app_sessions_at_work == 4
    assert aggregate([]) is None


def test_while_the_app_works_batches_are_small_and_rests_long_even_before_it_slows():
    """At work: a statement running at the reading, or one that ended within the last second
    (an app of short transactions is between two of them at most instants)."""
    state = ThrottleState(baseline=QUIET_COMMIT, seconds_per_row=ROW_COST, batch_size=2_500)
    for reading in (signals(active=1), signals(at_work=1)):
        step = decide(state, reading, 2_500, 2_500 * ROW_COST)
        assert step.state.zone == BUSY
        assert step.state.batch_size * ROW_COST <= APP_BATCH_SECONDS
        assert step.rest_seconds == BUSY_REST_RATIO * 2_500 * ROW_COST


def test_no_zone_makes_a_batch_larger_than_its_aims_allow():
    """A sweep's chunks (san/sweep.py) may be capped below MIN_BATCH; busy and critical keep
    to the cap (they once fell back to MIN_BATCH)."""
    capped = ThrottleState(baseline=QUIET_COMMIT, batch_size=7, max_batch=7)
    steps = run(capped, [signals(active=2), signals(blocked=1), signals(), app_slowed(2.0)])
    assert [step.state.batch_size for step in steps] == [7, 7, 7, 7]
