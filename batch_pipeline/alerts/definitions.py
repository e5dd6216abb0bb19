"""The alert sensors: every failed run, and every failed asset check, of any job of the code
location (so a new job needs no line here)."""

from dagster import Definitions, definitions

from batch_pipeline.alerts.sensors import asset_check_alert, run_failure_alert


@definitions
def defs() -> Definitions:
    return Definitions(sensors=[run_failure_alert, asset_check_alert])
