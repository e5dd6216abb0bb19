"""fast_lane_watch: one post per change of the fast lane's state, with the cause."""

from dagster import build_sensor_context, instance_for_test
from dagster._core.scheduler.instigation import TickStatus

from batch_pipeline.alerts.fast_lane_watch import fast_lane_watch
from batch_pipeline.fast_lane.sensors import LANE_OFF, SENSOR_NAME
from batch_pipeline_tests.runs import record_sensor_tick


def watch(instance, cursor):
    with build_sensor_context(instance=instance, cursor=cursor) as context:
        fast_lane_watch(context)
        return context.cursor


def test_a_failing_then_healing_lane_is_posted_once_per_change_with_its_cause(webhook):
    with instance_for_test() as instance:
        cursor = watch(instance, None)  # not ticked yet: nothing to say
        record_sensor_tick(instance, SENSOR_NAME, TickStatus.SKIPPED, 100.0, skip_reason="nothing")
        cursor = watch(instance, cursor)
        assert webhook == []  # a lane that heals from its first tick is news to nobody
        for at in (105.0, 110.0, 115.0):  # ticks every 5 s, all failing
            record_sensor_tick(
                instance,
                SENSOR_NAME,
                TickStatus.FAILURE,
                at,
                error="fast_heal_sensor cannot probe the SAN database: connection refused",
            )
            cursor = watch(instance, cursor)
        [failing] = webhook
        assert "the fast lane is failing" in failing["text"]
        assert "connection refused" in failing["text"]
        assert (
            f"https://dagster.san.example/locations/batch_pipeline/sensors/{SENSOR_NAME}"
            in failing["text"]
        )
        record_sensor_tick(instance, SENSOR_NAME, TickStatus.SUCCESS, 120.0)
        cursor = watch(instance, cursor)
        cursor = watch(instance, cursor)
        assert len(webhook) == 2
        assert "heals again (fast_heal_sensor was failing)" in webhook[1]["text"]
        record_sensor_tick(
            instance,
            SENSOR_NAME,
            TickStatus.SKIPPED,
            125.0,
            skip_reason=f"{LANE_OFF}: the recommended indexes ix_san_jobs_target are missing",
        )
        watch(instance, cursor)
        assert len(webhook) == 3
        assert "the fast lane is off" in webhook[2]["text"]
        assert "ix_san_jobs_target" in webhook[2]["text"]


def test_a_lane_switched_off_in_the_ui_is_posted(webhook):
    with instance_for_test() as instance:
        record_sensor_tick(instance, SENSOR_NAME, TickStatus.SUCCESS, 100.0)
        cursor = watch(instance, None)
        record_sensor_tick(instance, SENSOR_NAME, TickStatus.SUCCESS, 105.0, running=False)
        watch(instance, cursor)
        [stopped] = webhook
        assert "switched off" in stopped["text"] and "recovery_job" in stopped["text"]


def test_before_the_lane_s_first_tick_the_watch_says_so_not_that_it_is_not_started(webhook):
    with instance_for_test() as instance:
        with build_sensor_context(instance=instance) as context:
            said = fast_lane_watch(context).skip_message
    assert said == f"{SENSOR_NAME} has not finished a tick yet: nothing to watch"
    assert webhook == []
