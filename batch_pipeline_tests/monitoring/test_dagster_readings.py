"""What the endpoint reads from Dagster's instance, as plain functions over it."""

from datetime import date, datetime
from zoneinfo import ZoneInfo

from dagster import AssetMaterialization, instance_for_test
from dagster._core.scheduler.instigation import TickStatus

from batch_pipeline.monitoring.dagster_readings import day_end, read_dagster
from batch_pipeline.recovery.registry import AREAS
from batch_pipeline.til.auto_generation import AREA as TIL_AREA
from batch_pipeline_tests.runs import broken_state, record_sensor_tick, run_recovery

SEOUL = "Asia/Seoul"


def test_a_day_ends_at_the_next_midnight_of_san_s_zone():
    midnight = datetime(2026, 12, 3, tzinfo=ZoneInfo(SEOUL))
    assert day_end(date(2026, 12, 2), SEOUL) == midnight.timestamp()


def test_readings_of_an_instance_with_runs_sensors_and_til_days(san_db):
    broken_state(san_db)
    with instance_for_test() as instance:
        empty = read_dagster(instance, SEOUL)
        assert empty.last_success["recovery_job"] is None and empty.til_latest_day_end is None
        assert empty.sensors == [] and empty.lane is None and empty.exhausted == {}

        result, _ = run_recovery(san_db, instance)
        assert result.success
        for day in ("2026-11-30", "2026-12-01", "2026-11-29"):  # written out of order
            instance.report_runless_asset_event(AssetMaterialization(TIL_AREA, partition=day))
        record_sensor_tick(instance, "audit_index_sensor", TickStatus.SKIPPED, 100.0)
        readings = read_dagster(instance, SEOUL)
    assert readings.last_success["recovery_job"] is not None
    assert readings.last_success["fast_heal_job"] is None
    assert readings.exhausted == dict.fromkeys(AREAS, 0)
    # the latest day, not the latest written
    assert readings.til_latest_day_end == day_end(date(2026, 12, 1), SEOUL)
    [sensor] = readings.sensors
    assert (sensor.name, sensor.running, sensor.last_tick) == (
        "audit_index_sensor",
        True,
        {"skipped": 100.0},
    )
    assert readings.heal_totals.healed == {}  # audit_index_sensor has not folded them yet
