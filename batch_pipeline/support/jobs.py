"""explain_job (read-only: the story as Markdown metadata) and redrive_job (dry run by default),
both in process: one step each, launched from the Launchpad in seconds."""

from dagster import AssetSelection, define_asset_job, in_process_executor, job

from batch_pipeline.alerts.sensors import OPERATOR_RUN_TAG
from batch_pipeline.support.assets import redrive_asset
from batch_pipeline.support.ops import explain_target

OPERATOR_RUN = {OPERATOR_RUN_TAG: "true"}


@job(
    executor_def=in_process_executor,
    tags=OPERATOR_RUN,
    description="The story of one scrap, summary or job, for operators without a shell: config "
    "`ops.explain_target.config: {kind: scrap, id: 123}`; the run's explain_target step shows it. "
    "Reads only.",
)
def explain_job():
    explain_target()


redrive_job = define_asset_job(
    "redrive_job",
    selection=AssetSelection.assets(redrive_asset),
    executor_def=in_process_executor,
    tags=OPERATOR_RUN,
    description="One more job, beyond max_attempts, for exhausted targets of one area (config "
    "`ops.redrive.config`: area, target_ids, failed_since, error_message_contains, limit, "
    "reason). A dry run unless `dry_run: false`.",
)
