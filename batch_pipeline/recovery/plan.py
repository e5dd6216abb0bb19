"""What every recovery shares after detection: the settings it reads, the poison cap and the
per-run cap, the report, and the one skeleton that writes and audits (`write_recovery`)."""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

import pandas as pd
from sqlalchemy.engine import Connection, Engine

from batch_pipeline.san.audit import AUDIT_ID_LIMIT, capped_ids
from batch_pipeline.san.dispatch import Dispatcher
from batch_pipeline.san.enqueue import (
    BatchRunReport,
    BatchWritten,
    committed_before,
    run_in_batches,
)
from batch_pipeline.san.frames import FrameSchema
from batch_pipeline.san.limits import WriteLimits

# A (job_type, target_id) with this many jobs gets no new one: a poison target (a scrap the AI
# always fails on) must not be retried every run forever. 0 = unlimited.
MAX_ATTEMPTS = 10
# New jobs per area and run, oldest first: a backlog after an outage must not stampede the AI
# server.
MAX_ENQUEUE_PER_RUN = 5_000


# The instant an area of a run stamps on every row it writes (its new jobs' created_at, its
# closed ghosts' finished_at): its detection's, carried by the candidates frame to every attempt
# of the recover step. SAN's rows then say which run wrote them: a retry recognises an earlier
# attempt's writes without Dagster's event log (which may be the thing that failed), and a
# later run finds what a killed run committed (recovery/dead_runs.py).
WRITE_INSTANT = "batch_pipeline_write_instant"


def with_write_instant(candidates: pd.DataFrame, now: datetime) -> pd.DataFrame:
    candidates.attrs[WRITE_INSTANT] = now
    return candidates


def write_instant(candidates: pd.DataFrame) -> datetime | None:
    """The instant `with_write_instant` gave the frame, or None (a frame built elsewhere)."""
    return candidates.attrs.get(WRITE_INSTANT)


def recognises_its_writes(candidates: pd.DataFrame, now: datetime) -> bool:
    """Whether rows stamped `now` are this run's own: `now` is the write instant its detection
    gave the candidates (a frame built elsewhere, the fast lane's, carries none)."""
    return write_instant(candidates) == now


def minutes(delta: timedelta) -> int:
    """A threshold in whole minutes, as the run config and the descriptions give it."""
    return int(delta.total_seconds() // 60)


@dataclass(frozen=True)
class RecoveryPolicy:
    """How much one run may do, shared by every recovery."""

    max_attempts: int = MAX_ATTEMPTS  # poison cap per (job_type, target_id); 0 = unlimited
    max_enqueue_per_run: int = MAX_ENQUEUE_PER_RUN  # new jobs per area and run
    batch_size: int | None = None  # rows per write transaction; None: the throttle's
    dry_run: bool = False
    limits: WriteLimits = WriteLimits()

    def caps(self) -> dict:
        return {"max_attempts": self.max_attempts, "max_enqueue_per_run": self.max_enqueue_per_run}


class RecoverySettings(Protocol):
    """What a recovery reads of a run's settings (recovery/config.py's RecoveryConfig has it)."""

    stale_pending_after: timedelta
    stale_processing_after: timedelta
    orphan_min_age: timedelta
    orphan_min_age_minutes: int
    scrap_lookback: timedelta | None
    scrap_lookback_hours: int
    policy: RecoveryPolicy


@runtime_checkable
class Recovery(Protocol):
    """What recovery_job's ops, assets and checks know of a recovery: both shapes satisfy it (the
    ghost jobs' GhostJobRecovery, and TargetRecovery for every "target needs work" rule)."""

    area: str  # its asset, and its metadata's area
    name: str  # its ops' suffix: detect_<name>, recover_<name>
    noun: str  # what it heals, in the plural: "ghost jobs", "orphan scraps"
    id_key: str
    frame: FrameSchema
    extension: bool  # an extension of the design, not one of its services

    @property
    def rule_text(self) -> str: ...

    @property
    def detect_description(self) -> str: ...

    @property
    def recover_description(self) -> str: ...

    @property
    def asset_description(self) -> str: ...

    def detect(self, conn: Connection, settings: RecoverySettings, now: datetime) -> pd.DataFrame:
        """Its candidates now, by its rule, with their attempts."""

    def recover(
        self,
        engine: Engine,
        dispatcher: Dispatcher,
        candidates: pd.DataFrame,
        settings: RecoverySettings,
        now: datetime,
    ) -> "RecoveryReport":
        """Write what the candidates need, in bounded batches; its report."""

    def report_of_writes_at(
        self, engine: Engine, instant: datetime, limits: WriteLimits
    ) -> "RecoveryReport":
        """What it wrote at a run's write instant, read back from SAN's rows."""


@dataclass(frozen=True)
class RecoveryPlan:
    """Detected candidates split by the caps, oldest first."""

    to_enqueue: pd.DataFrame  # under the poison cap, within the per-run cap
    exhausted: pd.DataFrame  # already have max_attempts jobs: no new job
    deferred: pd.DataFrame  # beyond the per-run cap: left for the next run


def planned_report(
    area: str,
    candidates: pd.DataFrame,
    plan: RecoveryPlan,
    id_key: str,
    thresholds: dict,
    policy: RecoveryPolicy,
) -> "RecoveryReport":
    """The report of a run before it writes: what was detected, exhausted and deferred (all a
    dry run reports)."""
    return RecoveryReport(
        area=area,
        dry_run=policy.dry_run,
        thresholds={**thresholds, **policy.caps()},
        detected=len(candidates),
        exhausted=len(plan.exhausted),
        exhausted_ids=plan.exhausted[id_key].tolist(),
        deferred=len(plan.deferred),
        deferred_ids=plan.deferred[id_key].tolist(),
    )


def plan_recovery(
    candidates: pd.DataFrame, *, oldest_first_by: list[str], policy: RecoveryPolicy
) -> RecoveryPlan:
    ordered = candidates.sort_values(oldest_first_by, kind="stable")
    if policy.max_attempts:
        at_cap = ordered["attempts"] >= policy.max_attempts
    else:  # 0 = unlimited
        at_cap = pd.Series(False, index=ordered.index)
    eligible = ordered[~at_cap]
    return RecoveryPlan(
        to_enqueue=eligible.iloc[: policy.max_enqueue_per_run],
        exhausted=ordered[at_cap],
        deferred=eligible.iloc[policy.max_enqueue_per_run :],
    )


def heal_ages(waiting_since: pd.Series, now) -> list[float]:
    """Seconds from each `waiting_since` to `now` (in floats: a clamped year-1678 instant is more
    nanoseconds ago than an int64 holds)."""
    epoch_seconds = waiting_since.astype("int64") / 1e9
    return (pd.Timestamp(now).value / 1e9 - epoch_seconds).round(1).tolist()


# The upper bounds (seconds) of the time-to-heal histogram: the fast lane heals in seconds, a
# recovery run within its period (2 h by default), a TIL the next night. The audit stores a
# run's counts per bucket; the metrics endpoint adds them up as a Prometheus histogram.
TIME_TO_HEAL_BUCKETS = (15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 10800, 21600, 86400)
OVER_THE_LAST_BUCKET = "+Inf"
HEAL_AGE_HISTOGRAM = "heal_age_histogram"


def heal_age_buckets(ages: list[float]) -> dict[str, int]:
    """How many of `ages` fall in each bucket (not cumulative), keyed by its upper bound."""
    counts = dict.fromkeys([*map(str, TIME_TO_HEAL_BUCKETS), OVER_THE_LAST_BUCKET], 0)
    for age in ages:
        bound = next((b for b in TIME_TO_HEAL_BUCKETS if age <= b), None)
        counts[str(bound) if bound is not None else OVER_THE_LAST_BUCKET] += 1
    return counts


def heal_age_metadata(ages: list[float]) -> dict:
    """Median and max seconds waited by what a run healed, and their histogram (for the metrics
    endpoint); absent when it healed nothing, so the UI's plot has no false zeros."""
    if not ages:
        return {}
    series = pd.Series(ages)
    return {
        "heal_age_median_seconds": round(float(series.median()), 1),
        "heal_age_max_seconds": float(series.max()),
        # one JSON entry, not a number: the UI plots every numeric key run over run
        HEAL_AGE_HISTOGRAM: {
            "buckets": heal_age_buckets(ages),
            "sum_seconds": round(float(series.sum()), 1),
        },
    }


@dataclass
class RecoveryReport:
    """What one recovery area did in one run: the audit trail's content."""

    area: str
    dry_run: bool
    thresholds: dict
    detected: int = 0
    enqueued: int = 0
    exhausted: int = 0
    deferred: int = 0
    skipped_by_race: int = 0
    announce_failures: int = 0
    batches: int = 0
    recovered: list[dict] = field(default_factory=list)
    exhausted_ids: list[int] = field(default_factory=list)
    deferred_ids: list[int] = field(default_factory=list)
    # The candidates a worker or another writer changed between detection and the write.
    skipped_by_race_ids: list[int] = field(default_factory=list)
    # How long each healed fragment had waited (seconds since its job was created or started,
    # or its target last failed or was saved): the time to heal the UI plots run over run.
    heal_ages_seconds: list[float] = field(default_factory=list)
    # Candidates whose rows this attempt's writes changed (closed, or given a job): a retry of
    # the step finds them changed and would count them as races (merge_committed).
    changed: int = 0
    changed_ids: list[int] = field(default_factory=list)
    earlier_attempts: int = 0  # failed attempts of this step whose committed work is included
    # Of what it lists, how much earlier attempts of the step wrote (recognised in SAN's rows
    # by the run's write instant): the op sets earlier_attempts from it.
    written_earlier: int = 0
    ids_truncated: bool = False  # an earlier attempt's id lists were cut already
    # How the throttle paced this attempt's writes (san/throttle.py, ThrottleLog.metadata).
    throttle: dict = field(default_factory=dict)
    # ... and its detection's full sweep (san/sweep.py; {} without one)
    detection_throttle: dict = field(default_factory=dict)
    # Runs whose writes at this run's write instant it lists (the run it re-executes).
    includes_writes_of_runs: list[str] = field(default_factory=list)

    def metadata(self) -> dict:
        """Counts as numbers (plotted by the UI over time), ids as JSON lists."""
        return {
            **heal_age_metadata(self.heal_ages_seconds),
            "detected": self.detected,
            "enqueued": self.enqueued,
            "exhausted": self.exhausted,
            "deferred": self.deferred,
            "skipped_by_race": self.skipped_by_race,
            "announce_failures": self.announce_failures,
            "dry_run": self.dry_run,
            **capped_ids(
                recovered=self.recovered,
                exhausted_ids=self.exhausted_ids,
                deferred_ids=self.deferred_ids,
                skipped_by_race_ids=self.skipped_by_race_ids,
            ),
            **({"ids_truncated": True} if self.ids_truncated else {}),
            **({"earlier_attempts": self.earlier_attempts} if self.earlier_attempts else {}),
            **(
                {"includes_writes_of_runs": self.includes_writes_of_runs}
                if self.includes_writes_of_runs
                else {}
            ),
            "thresholds": self.thresholds,
            **({"throttle": self.throttle} if self.throttle else {}),
            **({"detection_throttle": self.detection_throttle} if self.detection_throttle else {}),
        }

    def committed_metadata(self, failed_attempt: int) -> dict:
        """The audit of an attempt that failed after some batches committed: what they did, for
        the UI and explain, and for a retry that detects anew to add to its own
        (merge_committed)."""
        return {
            **self.metadata(),
            COMMITTED_BY_FAILED_ATTEMPT: failed_attempt,
            "area": self.area,
            "changed": self.changed,
            "changed_ids": self.changed_ids[:AUDIT_ID_LIMIT],
            "batches": self.batches,
            "heal_ages_seconds": self.heal_ages_seconds[:AUDIT_ID_LIMIT],
        }

    def merge_committed(self, earlier: list[dict]) -> "RecoveryReport":
        """This attempt's report plus what earlier, failed attempts of the step committed (their
        committed_metadata), for a step that detects anew on retry (the fast lane): what they
        healed is no candidate of this attempt, so none of it is among its races."""
        for attempt in earlier:
            self.enqueued += attempt["enqueued"]
            self.recovered = attempt["recovered"] + self.recovered
            # the targets at the cap at detection are exhausted in both attempts: count them once
            earlier_exhausted = set(attempt["exhausted_ids"])
            again = sum(1 for i in self.exhausted_ids if i in earlier_exhausted)
            self.exhausted = attempt["exhausted"] + self.exhausted - again
            self.exhausted_ids = attempt["exhausted_ids"] + [
                i for i in self.exhausted_ids if i not in earlier_exhausted
            ]
            self.announce_failures += attempt["announce_failures"]
            self.batches += attempt.get("batches", 0)
            self.heal_ages_seconds = attempt["heal_ages_seconds"] + self.heal_ages_seconds
            self.changed += attempt["changed"]
            self.changed_ids = attempt.get("changed_ids", []) + self.changed_ids
            self.ids_truncated = self.ids_truncated or attempt["ids_truncated"]
            self.earlier_attempts += 1
        return self


# The metadata key that marks an observation as the committed work of a failed attempt.
COMMITTED_BY_FAILED_ATTEMPT = "committed_by_failed_attempt"


def attempted(work, batches, policy: RecoveryPolicy) -> int:
    """How many of `work` the committed batches wrote or re-checked (all of it, unless a batch
    failed)."""
    return min(len(work), batches.rows)


def with_partial_report(error: BaseException, complete) -> None:
    """If `error` came after some write batches committed (run_in_batches), attach the report
    of what they did, `complete(results, batches)`, for the op to record before it re-raises."""
    committed = committed_before(error)
    if committed is not None:
        setattr(error, PARTIAL_REPORT_ATTRIBUTE, complete(committed.results, committed.batches))


def partial_report(error: BaseException) -> "RecoveryReport | None":
    return getattr(error, PARTIAL_REPORT_ATTRIBUTE, None)


PARTIAL_REPORT_ATTRIBUTE = "batch_pipeline_partial_report"


@dataclass(frozen=True)
class Writes:
    """What one recovery writes, and how its report is read back from what committed."""

    items: Sequence  # written in bounded batches, in this order
    write_batch: Callable[[Connection, Sequence], BatchWritten]
    complete: Callable[[list, BatchRunReport], "RecoveryReport"]  # from the batches' results
    # the report when a batch failed after others had committed (default: `complete`)
    complete_partial: Callable[[list, BatchRunReport], "RecoveryReport"] | None = None


def write_recovery(
    engine: Engine, dispatcher: Dispatcher, writes: Writes, policy: RecoveryPolicy
) -> "RecoveryReport":
    """The skeleton every recovery writes through: `writes.items` in bounded batches, one
    transaction each (run_in_batches), then the report of what committed. When a batch fails
    after others committed, the report of those is attached to the error (partial_report), for
    the op to record before the error travels on."""
    try:
        results, batches = run_in_batches(
            engine, dispatcher, writes.items, policy.batch_size, writes.write_batch, policy.limits
        )
    except Exception as error:
        with_partial_report(error, writes.complete_partial or writes.complete)
        raise
    return writes.complete(results, batches)
