"""The fast lane's definitions: fast_heal_sensor, the fast_heal_job it requests, and their two
assets (the sensor reports the re-announcements itself)."""

from dagster import Definitions, definitions

from batch_pipeline.fast_lane.assets import fast_heal, reannouncements
from batch_pipeline.fast_lane.jobs import fast_heal_job
from batch_pipeline.fast_lane.sensors import fast_heal_sensor


@definitions
def defs() -> Definitions:
    return Definitions(
        assets=[fast_heal, reannouncements], jobs=[fast_heal_job], sensors=[fast_heal_sensor]
    )
