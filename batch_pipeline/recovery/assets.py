"""The audit-trail assets: each re-enqueue op materializes its recovery's asset once per run."""

from dagster import AssetSpec

from batch_pipeline.recovery.registry import RECOVERIES

GROUP = "san_recovery"

recovery_assets = [
    AssetSpec(recovery.area, group_name=GROUP, description=recovery.asset_description) for recovery in RECOVERIES
]
