"""The metrics endpoint: SAN's and Dagster's readings in Prometheus' exposition format, written by
prometheus_client (`python -m batch_pipeline metrics --port 9464`).

Ten scrapers cost one reading: readings are taken at most every `cache_seconds` (one at a
time, under a lock) and served from the cache in between. A source that fails gives its `_up`
gauge 0 and its error in the log (once per new error), never an error page: the scrape itself
always answers, so Prometheus sees the failure instead of a missing target.

A source that does not answer is a failure too. Server-side timeouts cannot see a connection
that stopped forwarding (a partition, a stalled pooler): each source is read in a thread of its
own and waited for at most READ_DEADLINE, so a scrape always answers within seconds.
"""

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta

from dagster import DagsterInstance
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from sqlalchemy.engine import Engine

from batch_pipeline.fast_lane.health import FAILING, OFF, STOPPED
from batch_pipeline.monitoring.dagster_readings import DagsterReadings, read_dagster
from batch_pipeline.monitoring.san_readings import SCRAPE_LIMITS, SanReadings, read_san
from batch_pipeline.recovery.cadence import period_of, recovery_cron
from batch_pipeline.recovery.ghost_jobs import STALE_PENDING_AFTER, STALE_PROCESSING_AFTER
from batch_pipeline.recovery.plan import minutes
from batch_pipeline.recovery.registry import AREAS
from batch_pipeline.san.database import read_transaction
from batch_pipeline.san.errors import first_line
from batch_pipeline.support.heal_totals import BUCKET_BOUNDS

log = logging.getLogger(__name__)

DEFAULT_PORT = 9464  # OpenTelemetry's Prometheus exporter's port, free of Dagster's own
DEFAULT_HOST = "127.0.0.1"
CACHE_SECONDS = 10.0


@dataclass(frozen=True)
class Readings:
    san: SanReadings | None
    dagster: DagsterReadings | None
    taken_at: float
    took_seconds: float


# How long a scrape waits for a source's answer. SCRAPE_LIMITS bound SAN's statements to 3 s on
# the server; this bounds what the server cannot see, within Prometheus' 10 s scrape timeout.
READ_DEADLINE = timedelta(seconds=5)
# A reading still unanswered after this is given up: the next scrape starts a new one. Until
# then scrapes wait on the one in flight, so a black-holed connection costs one thread, not one
# per scrape.
ABANDON_READING_AFTER = timedelta(seconds=60)


class Reading:
    """One read of a source, in a daemon thread (a hung read never holds the process's exit)."""

    def __init__(self, read: Callable):
        self.started = time.monotonic()
        self.done = threading.Event()
        self.value = self.error = None
        threading.Thread(target=self._run, args=(read,), daemon=True, name="metrics-read").start()

    def _run(self, read: Callable) -> None:
        try:
            self.value = read()
        except Exception as error:  # any failure of a source is its `_up 0`, never a 500
            self.error = error
        finally:
            self.done.set()

    def age(self) -> float:
        return time.monotonic() - self.started


class Source:
    """One thing the endpoint reads, and its latest error (logged once, when it changes)."""

    def __init__(self, name: str, read: Callable, deadline: timedelta = READ_DEADLINE):
        self.name, self.read, self.error = name, read, None
        self.deadline = deadline.total_seconds()
        self._reading: Reading | None = None

    def start(self) -> None:
        """Start a reading, unless one is still in flight and not yet given up."""
        reading = self._reading
        given_up = reading is not None and reading.age() > ABANDON_READING_AFTER.total_seconds()
        if reading is None or reading.done.is_set() or given_up:
            self._reading = Reading(self.read)

    def __call__(self):
        """The reading started last, waited for until its deadline."""
        if self._reading is None:
            self.start()
        reading = self._reading
        if not reading.done.wait(max(0.0, self.deadline - reading.age())):
            return self._failed(f"no answer within {self.deadline:g} s")
        if reading.error is not None:
            return self._failed(f"{type(reading.error).__name__}: {first_line(reading.error)}")
        if self.error is not None:
            log.info("metrics: %s is readable again", self.name)
        self.error = None
        return reading.value

    def _failed(self, said: str) -> None:
        if said != self.error:
            log.warning("metrics: cannot read %s: %s", self.name, said)
        self.error = said
        return None


class HealingCollector(Collector):
    """Collects batch_pipeline's metrics from cached readings of SAN and Dagster."""

    def __init__(
        self,
        engine: Engine | None,
        instance: Callable[[], DagsterInstance] | None,
        timezone: str,
        cache_seconds: float = CACHE_SECONDS,
    ):
        self.san = Source("the SAN database", lambda: self._read_san(engine))
        self.dagster = Source("Dagster's instance", lambda: read_dagster(instance(), timezone))
        self.cache_seconds = cache_seconds
        # SAN_RECOVERY_CRON and the zone are the process's: the period is read once
        self.recovery_period_seconds = period_of(recovery_cron(), timezone).total_seconds()
        self._lock = threading.Lock()
        self._readings: Readings | None = None

    @staticmethod
    def _read_san(engine: Engine | None) -> SanReadings:
        if engine is None:
            raise RuntimeError("no SAN database URL")
        with read_transaction(engine, SCRAPE_LIMITS) as conn:
            return read_san(conn)

    def readings(self) -> Readings:
        with self._lock:
            cached = self._readings
            if cached is None or time.time() - cached.taken_at >= self.cache_seconds:
                started = time.monotonic()
                self.san.start()  # both at once: a scrape waits for the slower, not the sum
                self.dagster.start()
                san, dagster = self.san(), self.dagster()
                self._readings = Readings(
                    san=san,
                    dagster=dagster,
                    taken_at=time.time(),
                    took_seconds=time.monotonic() - started,
                )
            return self._readings

    def collect(self) -> Iterator[Metric]:
        readings = self.readings()
        yield gauge("batch_pipeline_san_up", "1 when the SAN database answered", readings.san)
        yield gauge(
            "batch_pipeline_dagster_up", "1 when Dagster's instance answered", readings.dagster
        )
        yield gauge(
            "batch_pipeline_scrape_duration_seconds",
            "Seconds the latest reading of SAN and Dagster took",
            value=readings.took_seconds,
        )
        yield gauge(
            "batch_pipeline_readings_timestamp_seconds",
            "When the readings served were taken (they are cached for a few seconds)",
            value=readings.taken_at,
        )
        yield gauge(
            "batch_pipeline_recovery_period_seconds",
            "The longest gap between two recovery_schedule ticks (SAN_RECOVERY_CRON)",
            value=self.recovery_period_seconds,
        )
        if readings.san is not None:
            yield from san_metrics(readings.san)
        if readings.dagster is not None:
            yield from dagster_metrics(readings.dagster)


def gauge(name: str, documentation: str, up=None, *, value: float | None = None):
    return GaugeMetricFamily(
        name, documentation, value=value if value is not None else float(up is not None)
    )


def labelled(name: str, documentation: str, labels: list[str], samples) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=labels)
    for label_values, value in samples:
        family.add_metric(list(label_values), value)
    return family


def san_metrics(san: SanReadings) -> Iterator[Metric]:
    by_kind = [((a.job_type, a.status), a) for a in san.active_jobs]
    kind = ["job_type", "status"]
    yield labelled(
        "san_jobs_active", "Jobs PENDING or PROCESSING", kind, [(k, a.active) for k, a in by_kind]
    )
    yield labelled(
        "san_jobs_stale",
        f"Ghost jobs now: PENDING > {minutes(STALE_PENDING_AFTER)} min or PROCESSING > "
        f"{minutes(STALE_PROCESSING_AFTER)} min (the ghost-job recovery's rule)",
        kind,
        [(k, a.stale) for k, a in by_kind],
    )
    yield labelled(
        "san_jobs_oldest_active_age_seconds",
        "Age of the oldest active job (since created if PENDING, since started if PROCESSING)",
        kind,
        [(k, a.oldest_age_seconds) for k, a in by_kind],
    )
    yield labelled(
        "san_jobs_failed_recent",
        "Jobs SAN's workers failed in the last 10 minutes (ghosts batch_pipeline closed excluded)",
        ["job_type"],
        [((job_type,), count) for job_type, count in sorted(san.failed_recent.items())],
    )
    yield gauge(
        "batch_pipeline_fast_lane_indexes_missing",
        "Recommended indexes the fast lane needs that are missing or invalid",
        value=len(san.lane_indexes_missing),
    )


def dagster_metrics(dagster: DagsterReadings) -> Iterator[Metric]:
    yield from heal_metrics(dagster)
    yield from liveness_metrics(dagster)
    yield from lane_metrics(dagster)


def heal_metrics(dagster: DagsterReadings) -> Iterator[Metric]:
    """What was healed (the audit's totals), how long it had waited, what is exhausted."""
    totals = dagster.heal_totals
    healed_by_area = {**dict.fromkeys(AREAS, 0), **totals.healed}
    healed = CounterMetricFamily(
        "batch_pipeline_healed",
        "Targets given a new job, by area, since batch_pipeline was installed (from the audit)",
        labels=["area"],
    )
    for area, count in healed_by_area.items():
        healed.add_metric([area], count)
    yield healed
    histogram = HistogramMetricFamily(
        "batch_pipeline_time_to_heal_seconds",
        "How long each healed fragment had waited, by lane (recovery_job or the fast lane)",
        labels=["lane"],
    )
    for lane, counts in sorted(totals.buckets.items()):
        cumulative, running = [], 0
        for bound in BUCKET_BOUNDS:
            running += counts.get(bound, 0)
            cumulative.append((bound, running))
        histogram.add_metric([lane], cumulative, sum_value=totals.age_sum_seconds.get(lane, 0.0))
    yield histogram
    yield labelled(
        "batch_pipeline_throttle_seconds",
        "How long recovery_job's latest writes of each area wrote and rested (the throttle)",
        ["area", "doing"],
        [
            ((area, doing), float(log.get(f"{doing}_seconds", 0.0)))
            for area, log in sorted(dagster.throttle.items())
            for doing in ("write", "rest")
        ],
    )
    yield labelled(
        "batch_pipeline_throttle_slowed_batches",
        "Of recovery_job's latest write batches of each area, those the throttle slowed (busy or "
        "critical database)",
        ["area", "zone"],
        [
            ((area, zone), float(count))
            for area, log in sorted(dagster.throttle.items())
            for zone, count in sorted(log.get("batches_by_zone", {}).items())
            if zone in ("busy", "critical")
        ],
    )
    yield labelled(
        "batch_pipeline_exhausted_targets",
        "Targets at max_attempts, as recovery_job's latest run listed them (see `redrive`)",
        ["area"],
        [((area,), count) for area, count in sorted(dagster.exhausted.items())],
    )


def liveness_metrics(dagster: DagsterReadings) -> Iterator[Metric]:
    """Is the healer alive: each job's last success, each sensor's ticks, the daemon's beats."""
    yield labelled(
        "batch_pipeline_last_success_timestamp_seconds",
        "When the Dagster job's latest successful run ended",
        # not `job`: Prometheus gives that label to the scrape job, and would rename ours
        ["dagster_job"],
        [((job,), at) for job, at in dagster.last_success.items() if at is not None],
    )
    yield labelled(
        "batch_pipeline_sensor_running",
        "1 when the sensor is switched on",
        ["sensor"],
        [((s.name,), float(s.running)) for s in dagster.sensors],
    )
    yield labelled(
        "batch_pipeline_sensor_last_tick_timestamp_seconds",
        "When the sensor's latest tick of each status (success, skipped, failure) was",
        ["sensor", "status"],
        [((s.name, status), at) for s in dagster.sensors for status, at in s.last_tick.items()],
    )
    yield labelled(
        "batch_pipeline_daemon_heartbeat_timestamp_seconds",
        "The latest heartbeat of each of dagster-daemon's daemons",
        ["daemon"],
        [((daemon,), at) for daemon, at in sorted(dagster.heartbeats.items())],
    )


def lane_metrics(dagster: DagsterReadings) -> Iterator[Metric]:
    """The fast lane: failing or off, its threshold, the workers' claim latency; the TIL."""
    state = dagster.lane_health.state if dagster.lane_health else None
    yield gauge(
        "batch_pipeline_fast_lane_failing",
        "1 when fast_heal_sensor's latest tick failed",
        value=float(state == FAILING),
    )
    yield gauge(
        "batch_pipeline_fast_lane_off",
        "1 when the fast lane is off: fast_heal_sensor skips for want of indexes, or is stopped",
        value=float(state in (OFF, STOPPED)),
    )
    if dagster.lane is not None and dagster.lane.reannouncing:  # absent: not re-announcing
        yield gauge(
            "batch_pipeline_fast_lane_reannounce_threshold_seconds",
            "The age at which the fast lane announces an unclaimed PENDING job again",
            value=dagster.lane.threshold.total_seconds(),
        )
        if dagster.lane.claim_p99 is not None:
            yield gauge(
                "batch_pipeline_fast_lane_claim_latency_p99_seconds",
                "p99 of the seconds SAN's workers take to claim a job, as the fast lane measured",
                value=dagster.lane.claim_p99.total_seconds(),
            )
    if dagster.til_latest_day_end is not None:
        yield gauge(
            "batch_pipeline_til_latest_day_end_timestamp_seconds",
            "When the latest TIL day written ends (its next midnight in SAN's time zone)",
            value=dagster.til_latest_day_end,
        )


# Every metric name the endpoint can export (a histogram's and a counter's series included):
# what the alert rules and the Grafana dashboard may use (checked by their tests).
EXPORTED_METRICS = (
    "batch_pipeline_san_up",
    "batch_pipeline_dagster_up",
    "batch_pipeline_scrape_duration_seconds",
    "batch_pipeline_readings_timestamp_seconds",
    "batch_pipeline_recovery_period_seconds",
    "san_jobs_active",
    "san_jobs_stale",
    "san_jobs_oldest_active_age_seconds",
    "san_jobs_failed_recent",
    "batch_pipeline_fast_lane_indexes_missing",
    "batch_pipeline_healed_total",
    *(f"batch_pipeline_time_to_heal_seconds_{part}" for part in ("bucket", "sum", "count")),
    "batch_pipeline_exhausted_targets",
    "batch_pipeline_throttle_seconds",
    "batch_pipeline_throttle_slowed_batches",
    "batch_pipeline_last_success_timestamp_seconds",
    "batch_pipeline_sensor_running",
    "batch_pipeline_sensor_last_tick_timestamp_seconds",
    "batch_pipeline_daemon_heartbeat_timestamp_seconds",
    "batch_pipeline_fast_lane_failing",
    "batch_pipeline_fast_lane_off",
    "batch_pipeline_fast_lane_reannounce_threshold_seconds",
    "batch_pipeline_fast_lane_claim_latency_p99_seconds",
    "batch_pipeline_til_latest_day_end_timestamp_seconds",
)
