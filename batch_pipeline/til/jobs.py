"""til_auto_generation_job: runTilAutoGeneration() for one day partition."""

from dagster import (
    AssetChecksDefinition,
    AssetSelection,
    DailyPartitionsDefinition,
    JobDefinition,
    define_asset_job,
    job,
)

from batch_pipeline.til.ops import check_san_database_for_til, create_daily_tils, detect_til_users

TIL_JOB_NAME = "til_auto_generation_job"


def build_til_job(partitions: DailyPartitionsDefinition) -> JobDefinition:
    @job(
        name=TIL_JOB_NAME,
        partitions_def=partitions,
        tags={"dagster/max_runtime": "7200"},  # run monitoring cancels a run stuck longer
        description="For every user active on day D: a new DailySummary and an enqueued "
        "TIL_GENERATION job.",
    )
    def til_auto_generation_job():
        settings = check_san_database_for_til.alias("check_san_database")()
        create_daily_tils(settings, detect_til_users(settings))

    return til_auto_generation_job


def build_til_checks_job(til_coverage: AssetChecksDefinition):
    """til_coverage for one day (run tag batch_pipeline/til_day), run by til/sensors.py after every
    TIL run."""
    return define_asset_job(
        "til_checks_job",
        selection=AssetSelection.checks(til_coverage),
        description="til_coverage for one day partition.",
    )
