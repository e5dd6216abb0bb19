"""Is the fast lane healing? Its state as fast_heal_sensor's latest finished tick says it, read
from Dagster's instance: the fast lane's watch (alerts/) posts its changes, the metrics
endpoint exports it."""

from dataclasses import dataclass

from dagster import DagsterInstance

from batch_pipeline.fast_lane.sensors import LANE_OFF, SENSOR_NAME

HEALING = "healing"  # the latest tick succeeded, or had nothing to heal
FAILING = "failing"  # the latest tick failed (red in the UI)
OFF = "off"  # the latest tick skipped: the lane is off (indexes missing)
STOPPED = "stopped"  # switched off in the UI
NOT_STARTED = "not started"  # no tick yet (the daemon has not evaluated it)
# Dagster's tick statuses (TickStatus is in a private module: compared by value) and how many
# recent ticks are looked at for the latest finished one (one at most is still running).
SUCCESS, SKIPPED, FAILURE = "SUCCESS", "SKIPPED", "FAILURE"
RECENT_TICKS = 5


def sensor_states(instance: DagsterInstance) -> list:
    """Every sensor's stored state (a sensor has none before its first tick)."""
    return [s for s in instance.all_instigator_state() if s.instigator_type.value == "SENSOR"]


def sensor_state(instance: DagsterInstance, name: str):
    """The sensor's stored state (None before its first tick)."""
    return next((s for s in sensor_states(instance) if s.instigator_name == name), None)


@dataclass(frozen=True)
class LaneHealth:
    state: str
    cause: str = ""  # the tick's error or skip reason
    at: float | None = None  # the tick's timestamp


def lane_health(instance: DagsterInstance) -> LaneHealth:
    return health_of(instance, sensor_state(instance, SENSOR_NAME))


def health_of(instance: DagsterInstance, state) -> LaneHealth:
    """The lane's health from fast_heal_sensor's stored `state` (None: never ticked)."""
    if state is None:
        return LaneHealth(NOT_STARTED)
    if not state.is_running:
        return LaneHealth(STOPPED, f"{SENSOR_NAME} is switched off")
    recent = instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=RECENT_TICKS)
    tick = next((t for t in recent if t.status.value in (SUCCESS, SKIPPED, FAILURE)), None)
    if tick is None:
        return LaneHealth(NOT_STARTED)
    if tick.status.value == FAILURE:
        message = (tick.error.message if tick.error else "") or "the tick failed"
        return LaneHealth(FAILING, message.strip().splitlines()[0], tick.timestamp)
    reason = tick.skip_reason or ""
    if tick.status.value == SKIPPED and reason.startswith(LANE_OFF):
        return LaneHealth(OFF, reason, tick.timestamp)
    return LaneHealth(HEALING, reason, tick.timestamp)
