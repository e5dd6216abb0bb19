"""til_auto_generation_schedule: daily at 03:00 in SAN's time zone, for yesterday's partition.

03:00 because users rarely add scraps after midnight and load is lowest then. Dagster's
partitioned schedule targets the last complete day, so the 03:00 tick of D+1 runs D.
"""

from dagster import (
    DefaultScheduleStatus,
    JobDefinition,
    ScheduleDefinition,
    build_schedule_from_partitioned_job,
)

TIL_HOUR = 3


def til_schedule(til_job: JobDefinition) -> ScheduleDefinition:
    return build_schedule_from_partitioned_job(
        til_job,
        name="til_auto_generation_schedule",
        hour_of_day=TIL_HOUR,
        minute_of_hour=0,
        default_status=DefaultScheduleStatus.RUNNING,
        description=f"runTilAutoGeneration(): yesterday's TILs, daily at {TIL_HOUR:02d}:00.",
    )
