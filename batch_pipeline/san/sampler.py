"""The throttle's readings (san/throttle.py), taken beside a run's writes: a daemon thread calls
a dialect's `read_load` every SAMPLE_EVERY while batches are written, and every
RESTING_SAMPLE_EVERY while the throttle rests between them.

Each reading is a small transaction that commits (its time is what an app's commit feels), so
the app's commits wait behind ours: ten a second raised the app's p99 1.15x at 150 tx/s on two
cores (docs/benchmarks.md, "The feedback throttle"). A busy run rests most of its time, and a
rest needs one reading per decision (REACT_EVERY), not five.
"""

import threading
from collections import deque
from collections.abc import Callable

from batch_pipeline.san.throttle import REACT_EVERY, Signals

# While a batch is written: a reading between two batches never sees what an app transaction
# feels while a batch of ours runs.
SAMPLE_EVERY = 0.1
RESTING_SAMPLE_EVERY = REACT_EVERY  # while the throttle rests: one per decision


class Sampler:
    """Reads the database's signals in a daemon thread, every `every` (`resting_every` while
    `resting`); `take()` hands over the readings since the last call. A failed one is skipped."""

    def __init__(
        self,
        read: Callable[[], Signals | None],
        every: float = SAMPLE_EVERY,
        resting_every: float = RESTING_SAMPLE_EVERY,
    ):
        self.read, self.every, self.resting_every = read, every, resting_every
        self.samples: deque[Signals] = deque(maxlen=1_000)
        self.stopped = threading.Event()
        self.resting = False
        self.fresh = threading.Event()  # set by a reading, cleared by take()
        self.taken = 0
        self.thread = threading.Thread(target=self._run, daemon=True, name="throttle-sampler")
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.is_set():
            reading = self.read()
            if reading is not None:
                self.samples.append(reading)
                self.taken += 1
                self.fresh.set()
            self.stopped.wait(self.resting_every if self.resting else self.every)

    def rest(self, resting: bool) -> None:
        """A rest begins (fewer readings) or ends: the pace changes after the current wait (a
        reading the instant a batch starts would time our own commit, not the app's)."""
        self.resting = resting

    def take(self) -> list[Signals]:
        self.fresh.clear()
        return [self.samples.popleft() for _ in range(len(self.samples))]

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)
