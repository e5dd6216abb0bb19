"""How fast batch_pipeline writes: a feedback throttle steered by what SAN's database feels.

Every write path (recovery_job, the TIL day, the fast lane, redrive) writes through
`run_in_batches` (san/enqueue.py), which asks a Throttle before each batch how many rows to
write and how long to rest first. The Throttle reads the database's signals (a dialect's
`read_load`: the commit latency an app transaction feels now, the app's active sessions, app
sessions blocked by ours, replica lag) and applies `decide`, a pure function of the signals and
of the batches so far, in three zones:

- quiet (commits as fast as the learned quiet baseline, few app sessions active): no rest, and
  the batch grows toward TARGET_BATCH_SECONDS of work (pt-online-schema-change's chunk time),
  at most x GROWTH per batch;
- busy (commits SLOWDOWN_AT times the baseline, or the app's active sessions near the cores):
  the batch halves, and the rest grows with the slowdown, up to MAX_REST_RATIO times the
  batch's own work;
- critical (commits CRITICAL_AT times the baseline, an app session blocked by ours, replica lag
  past CRITICAL_LAG, the app's sessions far past the cores): the smallest batch, and a rest of
  CRITICAL_REST, so the run still makes progress (one small batch every few seconds) and
  finishes within its max_runtime.

A rest is proportional to the batch's own work, estimated from the rows it wrote at the measured
seconds per row, never to its wall time: a batch that waited for a lock rests no longer than one
that did not. During a rest the signals are read every REACT_EVERY: a database that quiets ends
the rest early, one that gets busier lengthens it.

Without signals (SQLite: one process, no other sessions to protect) the throttle is the batch
time rule: rest FALLBACK_REST_RATIO times the batch's work. An operator's `batch_size` fixes the
batch; an operator's `batch_pause_ratio` fixes the rest ratio (the critical zone still applies).
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

# -- the law's constants (their figures: docs/benchmarks.md, "The feedback throttle") ---------
TARGET_BATCH_SECONDS = 0.25  # a batch's work when the database is quiet
GROWTH = 2.0  # the most a batch grows from one to the next
MIN_BATCH = 10
MAX_BATCH = 5_000
START_BATCH = 100
SLOWDOWN_AT = 1.5  # commit latency / quiet baseline where the throttle starts to back off
CRITICAL_AT = 4.0  # ... where it writes the least it can
MAX_REST_RATIO = 30.0  # the busy zone's longest rest, times the batch's work
CRITICAL_REST = 3.0  # seconds between two smallest batches in the critical zone
CRITICAL_LAG = 30.0  # seconds of replica replay lag
BUSY_LOAD = 0.75  # the app's active sessions per database core
CRITICAL_LOAD = 2.0
REACT_EVERY = 0.5  # seconds between two readings during a rest
FALLBACK_REST_RATIO = 30.0  # without signals: the batch-time rule
# The quiet baseline: the lowest commit latency this run has seen (a run is minutes: what a
# database is like for good is learned again by the next), never below BASELINE_FLOOR. A
# reading is judged by the median of the last SMOOTHED readings: one slow fsync is noise.
BASELINE_FLOOR = 0.0005
SMOOTHED = 3
QUIET, BUSY, CRITICAL = "quiet", "busy", "critical"
UNMEASURED = "unmeasured"  # no signals (SQLite): the batch-time rule


@dataclass(frozen=True)
class Signals:
    """One reading of the database (a dialect's `read_load`)."""

    commit_seconds: float  # a one-row-of-WAL transaction's commit: what an app commit waits
    active_app_sessions: int  # the app's sessions running a statement now
    blocked_by_us: int  # app sessions waiting for a lock batch_pipeline holds
    replica_lag_seconds: float | None  # the largest replay lag, None without replicas
    cores: int  # the database host's cores, as far as known


@dataclass(frozen=True)
class ThrottleState:
    """What the law remembers between batches."""

    batch_size: int = START_BATCH
    baseline: float | None = None  # the quiet commit latency learned so far
    seconds_per_row: float | None = None  # the measured cost of a row's write
    zone: str = QUIET
    reason: str = "starting"
    recent: tuple[float, ...] = ()  # the latest commit latencies read


@dataclass(frozen=True)
class Overrides:
    """What an operator fixed in the run config (None: the throttle decides)."""

    batch_size: int | None = None
    rest_ratio: float | None = None


def zone_of(state: ThrottleState, signals: Signals) -> tuple[str, str, float]:
    """The zone the signals put the database in, why, and the commit slowdown (latency over
    the quiet baseline)."""
    baseline = max(state.baseline or signals.commit_seconds, BASELINE_FLOOR)
    slowdown = max(smoothed(state.recent, signals.commit_seconds), BASELINE_FLOOR) / baseline
    load = signals.active_app_sessions / max(signals.cores, 1)
    lag = signals.replica_lag_seconds or 0.0
    if signals.blocked_by_us:
        return CRITICAL, f"{signals.blocked_by_us} app session(s) wait for our locks", slowdown
    if lag >= CRITICAL_LAG:
        return CRITICAL, f"replica lag {lag:.0f} s", slowdown
    if slowdown >= CRITICAL_AT or load >= CRITICAL_LOAD:
        return CRITICAL, _said(slowdown, signals), slowdown
    if slowdown >= SLOWDOWN_AT or load >= BUSY_LOAD:
        return BUSY, _said(slowdown, signals), slowdown
    return QUIET, _said(slowdown, signals), slowdown


def _said(slowdown: float, signals: Signals) -> str:
    return (
        f"commits {slowdown:.1f}x quiet ({signals.commit_seconds * 1000:.1f} ms), "
        f"{signals.active_app_sessions} app sessions active on {signals.cores} cores"
    )


def learned_baseline(baseline: float | None, commit_seconds: float) -> float:
    """The quiet baseline after a reading: the fastest commit seen. Sustained load is never
    learned as quiet."""
    reading = max(commit_seconds, BASELINE_FLOOR)
    return reading if baseline is None else min(baseline, reading)


def smoothed(recent: tuple[float, ...], commit_seconds: float) -> float:
    """The median of the latest readings, this one included."""
    window = sorted((*recent, commit_seconds)[-SMOOTHED:])
    return window[len(window) // 2]


def work_seconds(state: ThrottleState, rows: int, seconds: float) -> float:
    """A batch's own work: its rows at the measured cost per row, so time it spent waiting for
    a lock does not count; its wall time until a cost is measured."""
    if state.seconds_per_row is None:
        return seconds
    return min(seconds, rows * state.seconds_per_row * 2)


def measured_cost(state: ThrottleState, rows: int, seconds: float) -> float | None:
    """The cost per row after a batch: a decaying average (as pt-online-schema-change sizes
    its chunks), ignoring a batch far slower than expected (it waited for something)."""
    if rows <= 0:
        return state.seconds_per_row
    observed = seconds / rows
    if state.seconds_per_row is None:
        return observed
    if observed > state.seconds_per_row * 4:
        return state.seconds_per_row
    return 0.7 * state.seconds_per_row + 0.3 * observed


@dataclass(frozen=True)
class Step:
    """What to do before the next batch."""

    state: ThrottleState
    rest_seconds: float


def decide(
    state: ThrottleState,
    signals: Signals | None,
    rows: int,
    seconds: float,
    overrides: Overrides = Overrides(),
) -> Step:
    """After a batch of `rows` that took `seconds` (0 rows: before the first batch), given the
    database's latest signals: the next batch's size and the rest before it."""
    cost = measured_cost(state, rows, seconds)
    work = work_seconds(state, rows, seconds)
    state = replace(state, seconds_per_row=cost)
    if signals is None:  # no signals: the batch-time rule
        ratio = overrides.rest_ratio if overrides.rest_ratio is not None else FALLBACK_REST_RATIO
        size = overrides.batch_size or state.batch_size
        return Step(
            replace(state, batch_size=size, zone=UNMEASURED, reason="no signals"), ratio * work
        )
    zone, reason, slowdown = zone_of(state, signals)
    state = replace(
        state,
        baseline=learned_baseline(state.baseline, signals.commit_seconds),
        zone=zone,
        reason=reason,
        recent=(*state.recent, signals.commit_seconds)[-SMOOTHED:],
    )
    if zone == CRITICAL:
        size, rest = MIN_BATCH, CRITICAL_REST
    elif zone == BUSY:
        size = max(MIN_BATCH, state.batch_size // 2)
        # from a rest as long as the work at the slowdown's start to MAX_REST_RATIO at critical
        share = (slowdown - SLOWDOWN_AT) / (CRITICAL_AT - SLOWDOWN_AT)
        rest = work * (1 + min(max(share, 0.0), 1.0) * (MAX_REST_RATIO - 1))
    else:
        target = TARGET_BATCH_SECONDS / cost if cost else state.batch_size * GROWTH
        size = int(min(max(target, MIN_BATCH), state.batch_size * GROWTH, MAX_BATCH))
        rest = 0.0
    if overrides.batch_size is not None:
        size = overrides.batch_size
    if overrides.rest_ratio is not None and zone != CRITICAL:
        rest = overrides.rest_ratio * work
    return Step(replace(state, batch_size=size), rest)


@dataclass
class ThrottleLog:
    """What a run's throttle did: for its metadata and its log."""

    batches: int = 0
    rows: int = 0
    write_seconds: float = 0.0
    rest_seconds: float = 0.0
    readings: int = 0
    zones: dict[str, int] = field(default_factory=dict)  # batches written in each zone
    slowest_reason: str = ""  # the reason of the worst zone met

    def metadata(self) -> dict:
        return {
            "batches": self.batches,
            "rows": self.rows,
            "write_seconds": round(self.write_seconds, 3),
            "rest_seconds": round(self.rest_seconds, 3),
            "readings": self.readings,
            "batches_by_zone": dict(self.zones),
            **({"why_it_slowed": self.slowest_reason} if self.slowest_reason else {}),
        }


class Throttle:
    """The law applied to a run's batches: `next_batch()` rests as decided (reading the signals
    every REACT_EVERY) and says how many rows to write; `written()` reports what a batch did."""

    def __init__(
        self,
        read_signals: Callable[[], Signals | None] | None,
        overrides: Overrides = Overrides(),
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.read_signals, self.overrides = read_signals, overrides
        self.clock, self.sleep = clock, sleep
        self.state = ThrottleState(batch_size=overrides.batch_size or START_BATCH)
        self.log = ThrottleLog()
        self.rest = 0.0
        self.last_rows = self.last_seconds = 0.0

    def _signals(self) -> Signals | None:
        if self.read_signals is None:
            return None
        self.log.readings += 1
        return self.read_signals()

    def next_batch(self) -> int:
        """Rest as the last decision said, then the next batch's size."""
        if self.log.batches == 0:  # before the first batch: the quiet baseline, our writes aside
            signals = self._signals()
            if signals is not None:
                baseline = learned_baseline(None, signals.commit_seconds)
                self.state = replace(
                    self.state, baseline=baseline, recent=(signals.commit_seconds,)
                )
            return self.state.batch_size
        rest_left, rested = self.rest, 0.0
        while rest_left > 0:
            nap = min(rest_left, REACT_EVERY)
            self.sleep(nap)
            self.log.rest_seconds += nap
            rest_left -= nap
            rested += nap
            if rest_left <= 0 or self.read_signals is None:
                continue
            again = decide(self.state, self._signals(), 0, 0.0, self.overrides).state
            if again.zone == QUIET:
                rest_left = 0.0  # the app has the database back: carry on now
            elif again.zone == CRITICAL:  # at least CRITICAL_REST, then one small batch
                rest_left = max(rest_left, CRITICAL_REST - rested)
                again = replace(again, batch_size=self.overrides.batch_size or MIN_BATCH)
            self.state = replace(
                self.state,
                zone=again.zone,
                reason=again.reason,
                baseline=again.baseline,
                recent=again.recent,
                batch_size=min(self.state.batch_size, again.batch_size),
            )
        return self.state.batch_size

    def written(self, rows: int, seconds: float) -> None:
        """A batch of `rows` committed after `seconds`: decide the rest and the next size."""
        step = decide(self.state, self._signals(), rows, seconds, self.overrides)
        self.state, self.rest = step.state, step.rest_seconds
        self.log.batches += 1
        self.log.rows += rows
        self.log.write_seconds += seconds
        self.log.zones[step.state.zone] = self.log.zones.get(step.state.zone, 0) + 1
        if step.state.zone in (BUSY, CRITICAL):
            self.log.slowest_reason = step.state.reason
