"""The TIL domain's definitions: the daily partitioned job, its schedule, and til_coverage run
after each of its runs."""

from dagster import Definitions, definitions

from batch_pipeline.san.timezone import san_timezone_name
from batch_pipeline.til.assets import til_asset
from batch_pipeline.til.checks import til_coverage_check
from batch_pipeline.til.jobs import build_til_checks_job, build_til_job
from batch_pipeline.til.partitions import til_partitions
from batch_pipeline.til.schedules import til_schedule
from batch_pipeline.til.sensors import til_checks_after_run


@definitions
def defs() -> Definitions:
    days = til_partitions(san_timezone_name())
    til_auto_generation = til_asset(days)
    til_job = build_til_job(til_auto_generation, days)
    til_coverage = til_coverage_check(days)
    til_checks_job = build_til_checks_job(til_coverage)
    return Definitions(
        assets=[til_auto_generation],
        asset_checks=[til_coverage],
        jobs=[til_job, til_checks_job],
        schedules=[til_schedule(til_job)],
        sensors=[til_checks_after_run(til_job, til_checks_job)],
    )
