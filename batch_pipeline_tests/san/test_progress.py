"""A long write or sweep tells its progress and the time left (san/progress.py): the estimate on
simulated batches, and the lines in a real run's Dagster event log."""

from batch_pipeline.recovery.assets import step_key
from batch_pipeline.san import progress
from batch_pipeline.san.progress import Progress, time_left
from batch_pipeline.san.throttle import BUSY, QUIET, ThrottleLog, ThrottleState
from batch_pipeline_tests.runs import broken_state, run_recovery
from batch_pipeline_tests.sweeps import small_chunks


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_time_left_is_what_remains_at_the_pace_since_the_last_line():
    assert time_left(done=3_000, total=10_000, done_before=1_000, seconds_since=30.0) == 105.0
    assert time_left(done=10_000, total=10_000, done_before=9_000, seconds_since=5.0) == 0.0
    # nothing done since: no pace, no estimate (never a division by zero or an infinite one)
    assert time_left(done=1_000, total=10_000, done_before=1_000, seconds_since=30.0) is None


def batches(tracker: Progress, clock: Clock, paced: ThrottleLog, state, rows: int, every: float):
    """A batch of `rows` that ends `every` seconds after the last one."""
    clock.now += every
    paced.rows += rows
    paced.batches += 1
    tracker.after_batch(paced, state)


def test_a_line_every_period_says_what_is_done_and_the_time_left_at_the_recent_pace():
    clock, said, paced = Clock(), [], ThrottleLog()
    tracker = Progress("writes", "rows", 10_000, every=30.0, say=said.append, clock=clock)
    quiet = ThrottleState(zone=QUIET)
    for _ in range(2):  # 20 s: no line yet
        batches(tracker, clock, paced, quiet, 1_000, 10.0)
    assert said == []
    paced.write_seconds, paced.rest_seconds = 4.0, 0.0
    batches(tracker, clock, paced, quiet, 1_000, 10.0)  # 30 s, 3,000 rows: 100 rows/s
    assert said == ["writes: 3,000 of 10,000 rows (30%) in 30 s: wrote 4.0 s, rested 0.0 s; quiet; "
                    "about 70 s left at its recent pace"]  # fmt: skip

    # the app gets busy: the pace of the last 30 s (500 rows) rules the estimate, not the
    # run's average (3,500 rows in 60 s would say 111 s)
    busy = ThrottleState(zone=BUSY, reason="probes 2.0x quiet (1.0 ms)")
    batches(tracker, clock, paced, busy, 500, 30.0)
    assert said[-1].startswith("writes: 3,500 of 10,000 rows (35%) in 60 s")
    assert "; busy (probes 2.0x quiet (1.0 ms)); about 390 s left at its recent pace" in said[-1]


def test_without_a_total_a_line_says_what_is_done_and_no_estimate():
    clock, said, paced = Clock(), [], ThrottleLog()
    tracker = Progress("detection sweep", "rows", None, "read", 30.0, said.append, clock)
    batches(tracker, clock, paced, ThrottleState(), 4_000, 31.0)
    assert said == ["detection sweep: 4,000 rows in 31 s: read 0.0 s, rested 0.0 s; quiet"]


def test_a_run_shows_its_writes_and_sweeps_progress_in_its_steps_event_log(san_db, monkeypatch):
    """PROGRESS_EVERY at 0: every batch and chunk says a line, in the step that did it."""
    monkeypatch.setattr(progress, "PROGRESS_EVERY", 0.0)
    small_chunks(monkeypatch, 1)  # the orphan sweep in chunks of one id
    broken_state(san_db)
    result, instance = run_recovery(san_db)
    assert result.success
    lines = [
        (entry.step_key, entry.user_message)
        for entry in instance.all_logs(result.run_id)
        if entry.user_message.startswith(("writes: ", "detection sweep: "))
    ]
    by_step = {step: [message for at, message in lines if at == step] for step, _ in lines}
    # the sweep in chunks of one id: a line each, counting up to the ids' span
    swept = by_step[step_key("detect_orphan_scraps")]
    assert len(swept) >= 2 and swept[-1].startswith("detection sweep: 4 of 4 ids (100%) in ")
    assert swept[0].startswith("detection sweep: 1 of 4 ids (25%) in ")
    [written] = by_step[step_key("recover_orphan_scraps")]
    assert written.startswith("writes: 1 of 1 rows (100%) in ")
    assert written.endswith("about 0 s left at its recent pace")
