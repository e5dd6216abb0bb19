"""The alert sensors: every failed run, and every failed asset check, of any job of the code
location (so a new job needs no line here), and the fast lane's changes of state."""

from dagster import Definitions, definitions

from batch_pipeline.alerts.fast_lane_watch import fast_lane_watch
from batch_pipeline.alerts.sensors import asset_check_alert, run_failure_alert


@definitions
def defs() -> Definitions:
    return Definitions(sensors=[run_failure_alert, asset_check_alert, fast_lane_watch])
