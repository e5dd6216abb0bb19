"""The fast lane's state, read from fast_heal_sensor's latest finished tick in the instance."""

from dagster import instance_for_test
from dagster._core.scheduler.instigation import TickStatus

from batch_pipeline.fast_lane.health import (
    FAILING,
    HEALING,
    NOT_STARTED,
    OFF,
    STOPPED,
    lane_health,
)
from batch_pipeline.fast_lane.sensors import LANE_OFF, SENSOR_NAME
from batch_pipeline_tests.runs import record_sensor_tick


def test_the_lane_s_state_follows_its_latest_finished_tick():
    with instance_for_test() as instance:
        assert lane_health(instance).state == NOT_STARTED
        record_sensor_tick(instance, SENSOR_NAME, TickStatus.SKIPPED, 100.0, skip_reason="nothing")
        assert lane_health(instance).state == HEALING
        record_sensor_tick(
            instance, SENSOR_NAME, TickStatus.FAILURE, 105.0, error="cannot probe: boom\nmore"
        )
        failing = lane_health(instance)
        assert (failing.state, failing.cause, failing.at) == (FAILING, "cannot probe: boom", 105.0)
        record_sensor_tick(
            instance, SENSOR_NAME, TickStatus.SKIPPED, 110.0, skip_reason=f"{LANE_OFF}: indexes"
        )
        assert lane_health(instance).state == OFF
        record_sensor_tick(instance, SENSOR_NAME, TickStatus.SUCCESS, 115.0)
        assert lane_health(instance).state == HEALING
        # a tick still running says nothing yet: the latest finished one counts
        record_sensor_tick(instance, SENSOR_NAME, TickStatus.STARTED, 120.0)
        assert lane_health(instance).at == 115.0
        record_sensor_tick(instance, SENSOR_NAME, TickStatus.SUCCESS, 125.0, running=False)
        assert lane_health(instance).state == STOPPED
