"""The throttle's readings beside the writes (san/sampler.py): a thread that reads at the
writing pace, fewer while the throttle rests, and hands over what it read."""

import time

from batch_pipeline.san.sampler import Sampler
from batch_pipeline.san.throttle import Signals


def signals() -> Signals:
    return Signals(
        probe_seconds=0.001,
        active_app_sessions=0,
        blocked_by_us=0,
        replica_lag_seconds=None,
        cores=2,
    )


def test_the_sampler_reads_beside_the_writes_and_hands_over_what_it_read():
    readings = iter([signals()] * 1_000)
    sampler = Sampler(lambda: next(readings), every=0.001)
    try:
        assert sampler.fresh.wait(5)
        taken = sampler.take()
        assert taken and all(isinstance(sample, Signals) for sample in taken)
    finally:
        sampler.stop()
    assert not sampler.thread.is_alive()


def test_a_resting_sampler_reads_at_the_resting_pace():
    """Resting, its pace is one reading an hour here: none more comes however long the test
    waits (writing, it read every millisecond)."""
    reads = []
    sampler = Sampler(lambda: reads.append(1) or signals(), every=0.001, resting_every=3_600)
    try:
        assert sampler.fresh.wait(5)
        sampler.rest(True)
        time.sleep(0.05)  # the wait begun before the rest ends, then one reading at most
        resting_reads = len(reads)
        time.sleep(0.2)
        assert len(reads) == resting_reads
    finally:
        sampler.stop()  # ends the hour's wait at once
    assert not sampler.thread.is_alive()
