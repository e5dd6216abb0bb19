"""What the metrics endpoint reads from Dagster's instance (the storage the webserver and the
daemon share), as plain functions over a DagsterInstance: the last success of each job, every
sensor's state and latest ticks, the daemons' heartbeats, the fast lane's cursor, the latest
exhausted counts, the latest TIL day written, and the heal totals (support/heal_totals.py).

Each is a handful of indexed lookups in Dagster's own tables, none grows with the run history.
"""

from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from dagster import AssetKey, DagsterInstance, DagsterRunStatus, RunsFilter

from batch_pipeline.fast_lane.health import (
    FAILURE,
    SKIPPED,
    SUCCESS,
    LaneHealth,
    health_of,
    sensor_states,
)
from batch_pipeline.fast_lane.jobs import fast_heal_job
from batch_pipeline.fast_lane.sensors import SENSOR_NAME
from batch_pipeline.fast_lane.tick import LaneState
from batch_pipeline.recovery.jobs import recovery_job
from batch_pipeline.recovery.registry import AREAS
from batch_pipeline.support.heal_totals import HealTotals, read_heal_totals
from batch_pipeline.til.auto_generation import AREA as TIL_AREA
from batch_pipeline.til.jobs import TIL_JOB_NAME

# The jobs whose last success the endpoint exports (the healer's heartbeat, run by run).
WATCHED_JOBS = (recovery_job.name, TIL_JOB_NAME, fast_heal_job.name)
TICK_STATUSES = {SUCCESS: "success", SKIPPED: "skipped", FAILURE: "failure"}


@dataclass(frozen=True)
class SensorReading:
    name: str
    running: bool  # switched on (in code or in the UI)
    last_tick: dict[str, float]  # status -> timestamp of its latest tick


@dataclass
class DagsterReadings:
    last_success: dict[str, float | None] = field(default_factory=dict)
    sensors: list[SensorReading] = field(default_factory=list)
    heartbeats: dict[str, float] = field(default_factory=dict)  # daemon type -> timestamp
    lane: LaneState | None = None
    lane_health: LaneHealth | None = None
    exhausted: dict[str, int] = field(default_factory=dict)
    throttle: dict[str, dict] = field(default_factory=dict)  # area -> its latest writes' pacing
    til_latest_day_end: float | None = None
    heal_totals: HealTotals = field(default_factory=HealTotals)


def last_success(instance: DagsterInstance, job_name: str) -> float | None:
    """When the job's latest successful run ended (epoch seconds)."""
    records = instance.get_run_records(
        RunsFilter(job_name=job_name, statuses=[DagsterRunStatus.SUCCESS]), limit=1
    )
    return records[0].end_time if records else None


def sensor_readings(instance: DagsterInstance, states: list) -> list[SensorReading]:
    """Each sensor of `states` (sensor_states), running or not, and its latest tick by status."""
    readings = []
    for state in states:
        origin, selector = state.instigator_origin_id, state.selector_id
        latest = instance.get_ticks(origin, selector, limit=1)
        last_tick = {}
        if latest:
            # Dagster's TickStatus, taken from a tick (its module is private)
            statuses = type(latest[0].status)
            for status, word in TICK_STATUSES.items():
                ticks = instance.get_ticks(origin, selector, limit=1, statuses=[statuses(status)])
                if ticks:
                    last_tick[word] = ticks[0].timestamp
        readings.append(SensorReading(state.instigator_name, state.is_running, last_tick))
    return sorted(readings, key=lambda reading: reading.name)


def lane_state(state) -> LaneState | None:
    """The fast lane's cursor (fast_heal_sensor's stored `state`): its re-announce threshold
    and the workers' claim latency."""
    cursor = getattr(state.instigator_data, "cursor", None) if state else None
    return LaneState.from_json(cursor) if cursor else None


def latest_audits(instance: DagsterInstance) -> dict[str, dict]:
    """Each area's latest materialization's metadata (plain values)."""
    found = {}
    for area in AREAS:
        entry = instance.get_latest_materialization_event(AssetKey(area))
        materialization = entry.asset_materialization if entry else None
        if materialization is not None:
            found[area] = {key: value.value for key, value in materialization.metadata.items()}
    return found


def latest_exhausted(audits: dict[str, dict]) -> dict[str, int]:
    """Each area's exhausted targets as recovery_job's latest materialization counted them."""
    return {area: int(meta["exhausted"]) for area, meta in audits.items() if "exhausted" in meta}


def latest_throttle(audits: dict[str, dict]) -> dict[str, dict]:
    """How the throttle paced each area's latest writes (san/throttle.py, ThrottleLog)."""
    return {area: meta["throttle"] for area, meta in audits.items() if meta.get("throttle")}


def day_end(day: date, timezone: str) -> float:
    """The instant day `day` ends in `timezone` (its next midnight), in epoch seconds."""
    return datetime.combine(day + timedelta(days=1), time(), ZoneInfo(timezone)).timestamp()


def til_latest_day_end(instance: DagsterInstance, timezone: str) -> float | None:
    """The end of the latest TIL day partition materialized: yesterday written, it is today's
    midnight (so `time() - it > 28 h` says yesterday was not written by 04:00)."""
    days = instance.get_materialized_partitions(AssetKey(TIL_AREA))
    return day_end(date.fromisoformat(max(days)), timezone) if days else None


def read_dagster(instance: DagsterInstance, timezone: str) -> DagsterReadings:
    states = sensor_states(instance)  # read once: every sensor, the fast lane's among them
    audits = latest_audits(instance)
    lane = next((state for state in states if state.instigator_name == SENSOR_NAME), None)
    return DagsterReadings(
        last_success={job: last_success(instance, job) for job in WATCHED_JOBS},
        sensors=sensor_readings(instance, states),
        heartbeats={
            daemon: heartbeat.timestamp
            for daemon, heartbeat in instance.get_daemon_heartbeats().items()
        },
        lane=lane_state(lane),
        lane_health=health_of(instance, lane),
        exhausted=latest_exhausted(audits),
        throttle=latest_throttle(audits),
        til_latest_day_end=til_latest_day_end(instance, timezone),
        heal_totals=read_heal_totals(instance),
    )
