"""til_auto_generation_job: runTilAutoGeneration() for one day partition, the job of the
`til_auto_generation` asset."""

from dagster import (
    AssetChecksDefinition,
    AssetsDefinition,
    AssetSelection,
    DailyPartitionsDefinition,
    define_asset_job,
    in_process_executor,
)

TIL_JOB_NAME = "til_auto_generation_job"


def build_til_job(til_asset: AssetsDefinition, partitions: DailyPartitionsDefinition):
    return define_asset_job(
        TIL_JOB_NAME,
        # til_coverage runs apart, after the run (til/sensors.py)
        selection=AssetSelection.assets(til_asset).without_checks(),
        partitions_def=partitions,
        tags={"dagster/max_runtime": "7200"},  # run monitoring cancels a run stuck longer
        # Its three steps run one after the other: one process, as recovery_job.
        executor_def=in_process_executor,
        description="For every user active on day D: a new DailySummary and an enqueued "
        "TIL_GENERATION job.",
    )


def build_til_checks_job(til_coverage: AssetChecksDefinition):
    """til_coverage for one day (run tag batch_pipeline/til_day), run by til/sensors.py after every
    TIL run."""
    return define_asset_job(
        "til_checks_job",
        selection=AssetSelection.checks(til_coverage),
        description="til_coverage for one day partition.",
    )
