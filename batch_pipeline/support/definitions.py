"""Support's definitions: explain_job, redrive_job and its asset, audit_index_sensor."""

from dagster import Definitions, definitions

from batch_pipeline.support.assets import redrive_asset
from batch_pipeline.support.jobs import explain_job, redrive_job
from batch_pipeline.support.sensors import audit_index_sensor


@definitions
def defs() -> Definitions:
    return Definitions(
        assets=[redrive_asset], jobs=[explain_job, redrive_job], sensors=[audit_index_sensor]
    )
