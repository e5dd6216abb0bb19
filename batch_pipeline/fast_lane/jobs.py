"""fast_heal_job: one fast-heal run, in process (a single step: no process per step to start)."""

from dagster import AssetSelection, define_asset_job, in_process_executor

from batch_pipeline.fast_lane.assets import fast_heal
from batch_pipeline.recovery.cadence import RECOVERY_CRON

FAST_HEAL_TAGS = {"dagster/max_runtime": "600"}  # run monitoring cancels a run stuck longer

fast_heal_job = define_asset_job(
    "fast_heal_job",
    selection=AssetSelection.assets(fast_heal),
    executor_def=in_process_executor,
    tags=FAST_HEAL_TAGS,
    description="The fast lane's writes: retry failed targets after a jittered backoff, enqueue "
    "targets the app never enqueued, within seconds (requested by fast_heal_sensor, which also "
    f"re-announces unclaimed jobs itself; recovery_job still runs at `{RECOVERY_CRON}` by "
    "default).",
)
