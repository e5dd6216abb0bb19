"""fast_heal_job: one fast-heal run, in process (a single step: no process per step to start)."""

from dagster import AssetSelection, define_asset_job, in_process_executor

from batch_pipeline.fast_lane.assets import fast_heal

FAST_HEAL_TAGS = {"dagster/max_runtime": "600"}  # run monitoring cancels a run stuck longer

fast_heal_job = define_asset_job(
    "fast_heal_job",
    selection=AssetSelection.assets(fast_heal),
    executor_def=in_process_executor,
    tags=FAST_HEAL_TAGS,
    description="The fast lane: re-announce unclaimed jobs, retry failed targets after a backoff, "
    "enqueue targets "
    "the app never enqueued, within minutes (requested by fast_heal_sensor; recovery_job still "
    "runs every 2 h).",
)
