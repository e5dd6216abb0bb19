"""TIL partitions: one per calendar day D in SAN's time zone; the key is D as YYYY-MM-DD."""

from dagster import DailyPartitionsDefinition

FIRST_TIL_DAY = "2025-01-01"


def til_partitions(timezone: str) -> DailyPartitionsDefinition:
    return DailyPartitionsDefinition(start_date=FIRST_TIL_DAY, timezone=timezone)
