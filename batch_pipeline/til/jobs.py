"""til_auto_generation_job: runTilAutoGeneration() for one day partition."""

from dagster import DailyPartitionsDefinition, JobDefinition, job

from batch_pipeline.til.ops import check_san_database_for_til, create_daily_tils, detect_til_users


def build_til_job(partitions: DailyPartitionsDefinition) -> JobDefinition:
    @job(
        name="til_auto_generation_job",
        partitions_def=partitions,
        description="For every user active on day D: a new DailySummary and an enqueued TIL_GENERATION job.",
    )
    def til_auto_generation_job():
        settings = check_san_database_for_til.alias("check_san_database")()
        create_daily_tils(settings, detect_til_users(settings))

    return til_auto_generation_job
