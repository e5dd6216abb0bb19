"""fast_lane_watch: posts to Slack when the fast lane stops healing (its ticks fail, it is off
for want of indexes, or it was switched off) and when it heals again: once per change of state,
with the cause, not once per 5-second tick. Its cursor is the state it last saw."""

from dagster import DefaultSensorStatus, SensorEvaluationContext, SkipReason, sensor

from batch_pipeline.alerts.slack import post_alert, sensor_link
from batch_pipeline.fast_lane.health import (
    FAILING,
    HEALING,
    NOT_STARTED,
    OFF,
    STOPPED,
    LaneHealth,
    lane_health,
)
from batch_pipeline.fast_lane.sensors import SENSOR_NAME

WATCH_INTERVAL_SECONDS = 30
HEADLINES = {
    FAILING: ":red_circle: the fast lane is failing: every tick of {sensor} fails",
    OFF: ":warning: the fast lane is off: {sensor} skips every tick",
    STOPPED: ":warning: the fast lane is switched off: {sensor} is stopped",
}
MEANWHILE = "lost events and failed targets now heal only at recovery_job's runs"


def change_text(previous: str, health: LaneHealth) -> str | None:
    """What to post when the lane went from `previous` to `health.state`; None if nothing
    changed, or the daemon has not ticked the lane yet."""
    if health.state in (previous, NOT_STARTED):
        return None
    link = sensor_link(SENSOR_NAME)
    if health.state == HEALING:
        if previous == NOT_STARTED:
            return None  # a first tick that heals is news to nobody
        return (
            f":white_check_mark: the fast lane heals again ({SENSOR_NAME} was {previous})\n{link}"
        )
    cause = f": {health.cause}" if health.cause else ""
    return f"{HEADLINES[health.state].format(sensor=SENSOR_NAME)}{cause}. {MEANWHILE}.\n{link}"


@sensor(
    name="fast_lane_watch",
    minimum_interval_seconds=WATCH_INTERVAL_SECONDS,
    default_status=DefaultSensorStatus.RUNNING,
    description=f"Posts to SAN_ALERT_WEBHOOK_URL when {SENSOR_NAME} starts failing, is off "
    "(indexes missing) or is switched off, and when it heals again: once per change, with the "
    "cause. Requests no runs.",
)
def fast_lane_watch(context: SensorEvaluationContext):
    health = lane_health(context.instance)
    previous = context.cursor or NOT_STARTED
    text = change_text(previous, health)
    if text:
        context.log.info(text)
        post_alert(text)
    if health.state != NOT_STARTED:
        context.update_cursor(health.state)
    if health.state == NOT_STARTED:
        return SkipReason(f"{SENSOR_NAME} has not finished a tick yet: nothing to watch")
    return SkipReason(
        f"{SENSOR_NAME} is {health.state}" + (" (posted the change)" if text else " (no change)")
    )
