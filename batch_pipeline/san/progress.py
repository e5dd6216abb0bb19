"""How far a long write or detection sweep has come: every PROGRESS_EVERY, a line in the run's
log (the step's event log in the UI) with what is done, how long it wrote and rested and why,
and an estimate of the time left at its pace over the last PROGRESS_EVERY (a busy app slows it,
a quiet database speeds it up again: the whole run's average would lag both).

The throttle (san/throttle.py) calls a Progress after every batch or chunk it paced; a run
shorter than PROGRESS_EVERY says nothing here (its metadata says how it was paced).
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from dagster import get_dagster_logger

from batch_pipeline.san.throttle import QUIET, ThrottleLog, ThrottleState

PROGRESS_EVERY = 30.0  # seconds between two progress lines

# Dagster captures this logger's records into the running step's event log, whatever the
# instance's python_logs; outside a run it is a plain Python logger.
log = get_dagster_logger("batch_pipeline")


def time_left(done: int, total: int, done_before: int, seconds_since: float) -> float | None:
    """Seconds until `total` at the pace from `done_before` to `done` over `seconds_since`;
    None when nothing was done meanwhile (no pace to tell from)."""
    if done <= done_before or seconds_since <= 0:
        return None
    return max(total - done, 0) * seconds_since / (done - done_before)


@dataclass
class Progress:
    """Says `line` every `every` seconds while batches are done (`after_batch`)."""

    what: str  # "writes", "detection sweep"
    unit: str  # what `done` and `total` count: "rows", "ids"
    total: int | None  # None: not known beforehand (no estimate)
    verb: str = "wrote"  # what its batches did: "wrote", "read"
    every: float = field(default_factory=lambda: PROGRESS_EVERY)  # read when created
    say: Callable[[str], None] = log.info
    clock: Callable[[], float] = time.monotonic
    started: float = field(init=False)
    said_at: float = field(init=False)
    done_when_said: int = field(init=False, default=0)

    def __post_init__(self):
        self.started = self.said_at = self.clock()

    def after_batch(self, paced: ThrottleLog, state: ThrottleState) -> None:
        now = self.clock()
        if now - self.said_at < self.every:
            return
        done = paced.rows
        left = (
            None
            if self.total is None
            else time_left(done, self.total, self.done_when_said, now - self.said_at)
        )
        self.say(self.line(done, now - self.started, paced, state, left))
        self.said_at, self.done_when_said = now, done

    def line(
        self,
        done: int,
        elapsed: float,
        paced: ThrottleLog,
        state: ThrottleState,
        left: float | None,
    ) -> str:
        """e.g. 'writes: 12,000 of 97,000 rows (12 %) in 61 s: wrote 3.1 s, rested 57.2 s; busy
        (probes ...); about 430 s left at its recent pace'."""
        total = self.total
        done = min(done, total) if total is not None else done
        of_total = f" of {total:,} {self.unit} ({done / total:.0%})" if total else f" {self.unit}"
        why = "" if state.zone == QUIET else f" ({state.reason})"
        estimate = "" if left is None else f"; about {left:,.0f} s left at its recent pace"
        return (
            f"{self.what}: {done:,}{of_total} in {elapsed:,.0f} s: {self.verb} "
            f"{paced.write_seconds:,.1f} s, rested {paced.rest_seconds:,.1f} s; {state.zone}{why}"
            f"{estimate}"
        )
