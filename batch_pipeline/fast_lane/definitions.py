"""The fast lane's definitions: fast_heal_sensor and the fast_heal_job it requests."""

from dagster import Definitions, definitions

from batch_pipeline.fast_lane.assets import fast_heal
from batch_pipeline.fast_lane.jobs import fast_heal_job
from batch_pipeline.fast_lane.sensors import fast_heal_sensor


@definitions
def defs() -> Definitions:
    return Definitions(assets=[fast_heal], jobs=[fast_heal_job], sensors=[fast_heal_sensor])
