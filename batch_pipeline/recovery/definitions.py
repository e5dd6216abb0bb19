"""The recovery domain's definitions: recovery_job (every recovery of the registry), its
schedule, and the freshness watchdog."""

from dagster import Definitions, definitions

from batch_pipeline.recovery.assets import recovery_assets
from batch_pipeline.recovery.freshness import recovery_freshness
from batch_pipeline.recovery.jobs import recovery_job
from batch_pipeline.recovery.schedules import recovery_schedule
from batch_pipeline.san.timezone import san_timezone_name


@definitions
def defs() -> Definitions:
    timezone = san_timezone_name()
    freshness_checks, freshness_job, freshness_schedule = recovery_freshness(timezone)
    return Definitions(
        assets=recovery_assets,  # they carry their other checks themselves
        asset_checks=freshness_checks,
        jobs=[recovery_job, freshness_job],
        schedules=[recovery_schedule(timezone), freshness_schedule],
    )
