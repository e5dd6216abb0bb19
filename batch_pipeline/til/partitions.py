"""TIL partitions: one per calendar day D in SAN's time zone; the key is D as YYYY-MM-DD."""

from datetime import date

from dagster import DailyPartitionsDefinition

from batch_pipeline.san.settings import Setting

# The first day partition unless SAN_TIL_FIRST_DAY says otherwise. Recent on purpose: every day
# from it on shows as a partition, and a backfill of "all" missing days gives each of their
# active users a TIL; set it to the day the pipeline went live.
FIRST_TIL_DAY = date(2026, 11, 1)
# Years of daily partitions before this would only slow the UI down: no SAN ran then.
EARLIEST_TIL_DAY = date(2000, 1, 1)
SAN_TIL_FIRST_DAY = Setting(
    "SAN_TIL_FIRST_DAY",
    FIRST_TIL_DAY.isoformat(),
    "the first TIL day partition (`YYYY-MM-DD`, from 2000-01-01, not in the future): set it to the "
    'day the pipeline went live, so *Partitions* and a backfill of "all" missing days cover '
    "only the days it is responsible for",
)


# Dagster's run tags of a partitioned run: its partition key (day D), and the partition set that
# the job's Partitions tab counts a run under (`<job>_partition_set`).
PARTITION_TAG = "dagster/partition"
PARTITION_SET_TAG = "dagster/partition_set"


def partition_set_name(job_name: str) -> str:
    """The name Dagster gives a partitioned job's partition set."""
    return f"{job_name}_partition_set"


class TilPartitionsConfigError(ValueError):
    pass


def first_til_day(today: date | None = None) -> date:
    """SAN_TIL_FIRST_DAY (YYYY-MM-DD, not in the future), default FIRST_TIL_DAY; else an error at
    load."""
    raw = SAN_TIL_FIRST_DAY.raw()
    if raw is None:
        return FIRST_TIL_DAY
    try:
        day = date.fromisoformat(raw)
    except ValueError:
        raise TilPartitionsConfigError(
            f"SAN_TIL_FIRST_DAY={raw!r} is not a date YYYY-MM-DD (the first TIL day partition)"
        ) from None
    if day < EARLIEST_TIL_DAY:
        raise TilPartitionsConfigError(
            f"SAN_TIL_FIRST_DAY={raw!r} is before {EARLIEST_TIL_DAY}: no SAN ran then"
        )
    if day > (today or date.today()):
        raise TilPartitionsConfigError(
            f"SAN_TIL_FIRST_DAY={raw!r} is in the future: there would be no TIL day to run"
        )
    return day


def til_partitions(timezone: str) -> DailyPartitionsDefinition:
    return DailyPartitionsDefinition(start_date=first_til_day().isoformat(), timezone=timezone)
