"""How fast batch_pipeline writes: a feedback throttle steered by what SAN's database feels.

Every write path (recovery_job, the TIL day, the fast lane, redrive) writes through
`run_in_batches` (san/enqueue.py), which asks a Throttle before each batch how many rows to
write and how long to rest first. A Sampler (san/sampler.py) reads the database's signals
beside the writes (a dialect's `read_load`: a small transaction's time, as an app's feels it,
the app's sessions at work, those blocked by ours, replica lag), and the Throttle applies
`decide`, a pure function of those readings and the batches so far, in three zones:
- quiet (no app session at work within APP_AT_WORK_WITHIN, probes near the learned quiet
  baseline): no rest; the batch grows toward TARGET_BATCH_SECONDS of work (pt-online-schema-
  change's chunk time), at most x GROWTH per batch;
- busy (the app at work, or probes SLOWDOWN_AT times the baseline): APP_BATCH_SECONDS of work
  (`busy_size`), resting BUSY_REST_RATIO to MAX_REST_RATIO times it as the probes slow;
- critical: an app session blocked by ours or replica lag past CRITICAL_LAG (the emergency:
  the smallest batch), probes CRITICAL_AT times the baseline or the app's sessions far past the
  cores (overload: the floor, busy batches), each CRITICAL_REST apart: the run still progresses.
Probes slowed with no app session at work (nor any we cannot see) are our own doing: not judged.

A rest is proportional to the batch's own work (its rows at the measured seconds per row), never
its wall time: a batch that waited for a lock rests no longer than one that did not. A rest
is judged again every REACT_EVERY: a database that quiets ends it, a critical one lengthens it.

Without signals (SQLite: one process, no other sessions to protect) the throttle is the batch
time rule: rest FALLBACK_REST_RATIO times the batch's work. An operator's `batch_size` fixes the
batch; an operator's `batch_pause_ratio` fixes the rest ratio (the critical zone still applies).
"""

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

# -- the law's constants (their figures: docs/benchmarks.md, "The feedback throttle") ---------
TARGET_BATCH_SECONDS = 0.25  # a batch's work when the database is quiet
GROWTH = 2.0  # the most a batch grows from one to the next
MIN_BATCH = 10
MAX_BATCH = 5_000
START_BATCH = 100
SLOWDOWN_AT = 1.5  # probe time / quiet baseline where the throttle starts to back off
CRITICAL_AT = 4.0  # ... where overload keeps it to the floor
# While the app works, our batches hold its commits behind our WAL and take its cores: batches
# of APP_BATCH_SECONDS (well above a batch's fixed cost: at 0.005 s they fell to MIN_BATCH and
# the rest multiplied their overhead), resting BUSY_REST_RATIO to MAX_REST_RATIO times that.
APP_BATCH_SECONDS = 0.02
BUSY_REST_RATIO = 25.0
MAX_REST_RATIO = 60.0
CRITICAL_REST = 3.0  # seconds between two batches in the critical zone
CRITICAL_LAG = 30.0  # seconds of replica replay lag
BUSY_LOAD = 0.75  # the app's active sessions per database core
APP_AT_WORK_WITHIN = 1.0  # seconds: an app session that ran a statement this recently is at work
CRITICAL_LOAD = 2.0  # ... past which it is critical
REACT_EVERY = 0.5  # seconds between two decisions during a rest
JUDGED_QUANTILE = 0.9  # of the probe times read while a batch ran (and since): its judge
FALLBACK_REST_RATIO = 30.0  # without signals: the batch-time rule
# The quiet baseline: the fastest probe this run has seen (the next run learns it again), never
# below BASELINE_FLOOR; a reading is judged by the median of SMOOTHED (one slow fsync is noise).
BASELINE_FLOOR = 0.0005
SMOOTHED = 3
QUIET, BUSY, CRITICAL = "quiet", "busy", "critical"
UNMEASURED = "unmeasured"  # no signals (SQLite): the batch-time rule


@dataclass(frozen=True)
class Signals:
    """One reading of the database (a dialect's `read_load`)."""

    probe_seconds: float  # a small transaction's time, statements and commit: what an app's feels
    active_app_sessions: int  # the app's sessions running a statement now
    blocked_by_us: int  # app sessions waiting for a lock batch_pipeline holds
    replica_lag_seconds: float | None  # the largest replay lag, None without replicas
    cores: int  # the database host's cores, as far as known
    # the app's sessions on SAN's database with a statement within APP_AT_WORK_WITHIN (an app of
    # short transactions is between two of them at most instants: not `active` then)
    app_sessions_at_work: int = 0
    # sessions on SAN's database whose state our role may not read (no pg_read_all_stats)
    app_sessions_unseen: int = 0


@dataclass(frozen=True)
class ThrottleState:
    """What the law remembers between batches."""

    batch_size: int = START_BATCH
    baseline: float | None = None  # the quiet probe time learned so far
    seconds_per_row: float | None = None  # the measured cost of a row's write
    zone: str = QUIET
    reason: str = "starting"
    recent: tuple[float, ...] = ()  # the latest probe times read
    # What a quiet database's batch aims at: its work, and its most rows (a write batch's, or
    # the ids a detection's chunk reads: san/sweep.py)
    target_seconds: float = TARGET_BATCH_SECONDS
    max_batch: int = MAX_BATCH
    busy_seconds: float = APP_BATCH_SECONDS  # ... and its work while the app works
    # ... and its fewest rows then. A batch's fixed cost (a round trip, waiting for a core) is
    # in its cost per row, so a smaller batch looks dearer per row and the next is smaller
    # still: under saturation a sweep's chunks fell to 10 ids and its pace to 1/100th
    busy_floor: int = MIN_BATCH
    fallback_rest_ratio: float = FALLBACK_REST_RATIO  # the batch-time rule's, without signals


# A write batch's aims: TARGET_BATCH_SECONDS and MAX_BATCH (a detection's: san/sweep.py).
WRITE_AIMS = ThrottleState()


@dataclass(frozen=True)
class Overrides:
    """What an operator fixed in the run config (None: the throttle decides)."""

    batch_size: int | None = None
    rest_ratio: float | None = None


def zone_of(state: ThrottleState, signals: Signals) -> tuple[str, str, float]:
    """The zone the signals put the database in, why, and the slowdown (probe time over
    the quiet baseline)."""
    baseline = max(state.baseline or signals.probe_seconds, BASELINE_FLOOR)
    slowdown = max(smoothed(state.recent, signals.probe_seconds), BASELINE_FLOOR) / baseline
    load = signals.active_app_sessions / max(signals.cores, 1)
    if signals.blocked_by_us:
        return CRITICAL, f"{signals.blocked_by_us} app session(s) wait for our locks", slowdown
    if held(signals):
        return CRITICAL, f"replica lag {signals.replica_lag_seconds:.0f} s", slowdown
    at_work = signals.active_app_sessions or signals.app_sessions_at_work
    # Slower probes with no app at work are our own batches' doing: nobody to protect (judging
    # them made an idle run rest 6x longer than it wrote); sessions we cannot see might be it.
    judged = slowdown if at_work or signals.app_sessions_unseen else min(slowdown, 1.0)
    if judged >= CRITICAL_AT or load >= CRITICAL_LOAD:
        return CRITICAL, _said(slowdown, signals), judged
    if judged >= SLOWDOWN_AT or load >= BUSY_LOAD or at_work:
        return BUSY, _said(slowdown, signals), judged
    return QUIET, _said(slowdown, signals), judged


def held(signals: Signals) -> bool:
    """The emergency: an app session waits for our locks, or a replica lags past CRITICAL_LAG."""
    return bool(signals.blocked_by_us) or (signals.replica_lag_seconds or 0.0) >= CRITICAL_LAG


def _said(slowdown: float, signals: Signals) -> str:
    return (
        f"probes {slowdown:.1f}x quiet ({signals.probe_seconds * 1000:.1f} ms), "
        f"{signals.active_app_sessions} app sessions active on {signals.cores} cores, "
        f"{signals.app_sessions_at_work} at work within {APP_AT_WORK_WITHIN:g} s"
        + (f", {signals.app_sessions_unseen} unseen" if signals.app_sessions_unseen else "")
    )


def aggregate(samples: Sequence[Signals]) -> Signals | None:
    """The readings taken since the last decision as one: their JUDGED_QUANTILE probe time,
    and the most app sessions at work, blocked by ours, and the largest replica lag seen."""
    if not samples:
        return None
    probes = sorted(sample.probe_seconds for sample in samples)
    lags = [s.replica_lag_seconds for s in samples if s.replica_lag_seconds is not None]
    return Signals(
        probe_seconds=probes[min(int(len(probes) * JUDGED_QUANTILE), len(probes) - 1)],
        active_app_sessions=max(sample.active_app_sessions for sample in samples),
        blocked_by_us=max(sample.blocked_by_us for sample in samples),
        replica_lag_seconds=max(lags) if lags else None,
        cores=samples[-1].cores,
        app_sessions_at_work=max(sample.app_sessions_at_work for sample in samples),
        app_sessions_unseen=max(sample.app_sessions_unseen for sample in samples),
    )


class Readings(Protocol):
    """What the Throttle asks of a Sampler (san/sampler.py): the readings taken beside the writes
    since the last call, and whether it rests."""

    fresh: threading.Event  # set by a reading, cleared by take()
    taken: int

    def take(self) -> list[Signals]: ...
    def rest(self, resting: bool) -> None: ...
    def stop(self) -> None: ...


def learned_baseline(baseline: float | None, probe_seconds: float) -> float:
    """The quiet baseline after a reading: the fastest probe seen (load is never learned)."""
    reading = max(probe_seconds, BASELINE_FLOOR)
    return reading if baseline is None else min(baseline, reading)


def smoothed(recent: tuple[float, ...], probe_seconds: float) -> float:
    """The median of the latest readings, this one included."""
    window = sorted((*recent, probe_seconds)[-SMOOTHED:])
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


def smallest(state: ThrottleState) -> int:
    """The smallest batch: MIN_BATCH, unless the aims cap batches below it."""
    return min(MIN_BATCH, state.max_batch)


def busy_size(state: ThrottleState, cost: float | None) -> int:
    """The next batch while the app works: the aims' busy_seconds of work (a write batch's:
    APP_BATCH_SECONDS) at once from a larger one, grown back to it at most x GROWTH from a
    smaller one (critical's), held there (every busy batch once halved: a sweep fell to chunks
    of 10 ids and outlived its run), never below the aims' busy_floor."""
    app_sized = int(state.busy_seconds / cost) if cost else state.batch_size
    size = min(app_sized, int(state.batch_size * GROWTH))
    floor = max(smallest(state), min(state.busy_floor, state.max_batch))
    return max(floor, min(size, state.max_batch))


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
        given = overrides.rest_ratio
        ratio = state.fallback_rest_ratio if given is None else given
        size = overrides.batch_size or state.batch_size
        return Step(
            replace(state, batch_size=size, zone=UNMEASURED, reason="no signals"), ratio * work
        )
    zone, reason, slowdown = zone_of(state, signals)
    state = replace(
        state,
        baseline=learned_baseline(state.baseline, signals.probe_seconds),
        zone=zone,
        reason=reason,
        recent=(*state.recent, signals.probe_seconds)[-SMOOTHED:],
    )
    if zone == CRITICAL:  # held by our locks, a replica behind: the least; overload: the floor
        # the floor is a write batch's busy work whatever the aims' (3 s apart a chunk's core
        # is a small share; 5 ms chunks would make a saturated sweep about 4x as long)
        floor_sized = busy_size(replace(state, busy_seconds=APP_BATCH_SECONDS), cost)
        floor = min(floor_sized, state.max_batch if rows else state.batch_size)
        size, rest = smallest(state) if held(signals) else floor, CRITICAL_REST
    elif zone == BUSY and rows == 0:  # a reading during a rest: no batch to size again
        size, rest = state.batch_size, 0.0
    elif zone == BUSY:
        size = busy_size(state, cost)
        # BUSY_REST_RATIO while the app's transactions are not slowed, MAX_REST_RATIO at critical
        share = (slowdown - 1.0) / (CRITICAL_AT - 1.0)
        rest = work * (
            BUSY_REST_RATIO + min(max(share, 0.0), 1.0) * (MAX_REST_RATIO - BUSY_REST_RATIO)
        )
    else:
        target = state.target_seconds / cost if cost else state.batch_size * GROWTH
        size = int(min(max(target, smallest(state)), state.batch_size * GROWTH, state.max_batch))
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
        sleep: Callable[[float], None] = time.sleep,
        sampler: Readings | None = None,
        aims: ThrottleState = WRITE_AIMS,
        after_batch: Callable[[ThrottleLog, ThrottleState], None] | None = None,
    ):
        """`sampler`: readings beside the writes (without one each decision reads once, now: a
        test's simulated signals). `aims`: a quiet batch's target_seconds and max_batch.
        `after_batch`: told the log and the state after each batch (san/progress.py)."""
        self.read_signals, self.overrides, self.sampler = read_signals, overrides, sampler
        self.after_batch = after_batch
        self.sleep = sleep
        self.state = replace(aims, batch_size=overrides.batch_size or aims.batch_size)
        self.log = ThrottleLog()
        self.rest = 0.0
        self.last: Signals | None = None  # the latest readings, aggregated

    def _signals(self) -> Signals | None:
        if self.read_signals is None:
            return None
        if self.sampler is not None:
            samples = self.sampler.take()
            if not samples and self.last is None and self.sampler.fresh.wait(1.0):
                samples = self.sampler.take()  # at the start: its first reading
            self.log.readings = self.sampler.taken
            # none new (a batch shorter than the readings' pace): the latest still holds
            self.last = aggregate(samples) or self.last
            return self.last
        self.log.readings += 1
        return self.read_signals()

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()

    def next_batch(self) -> int:
        """Rest as the last decision said, then the next batch's size."""
        if self.log.batches == 0:  # before the first batch: the quiet baseline, our writes aside
            signals = self._signals()
            if signals is not None:
                baseline = learned_baseline(None, signals.probe_seconds)
                self.state = replace(self.state, baseline=baseline, recent=(signals.probe_seconds,))
            return self.state.batch_size
        rest_left, rested = self.rest, 0.0
        self._resting(True)
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
            elif again.zone == CRITICAL:  # at least CRITICAL_REST, then the floor's batch
                rest_left = max(rest_left, CRITICAL_REST - rested)
            # a reading judges the zone (no batch, no cost learned): never a larger batch
            self.state = replace(again, batch_size=min(self.state.batch_size, again.batch_size))
        self._resting(False)
        return self.state.batch_size

    def _resting(self, resting: bool) -> None:
        if self.sampler is not None:
            self.sampler.rest(resting)

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
        if self.after_batch is not None:
            self.after_batch(self.log, self.state)
