"""TIL partitions: one per calendar day D in SAN's time zone; the key is D as YYYY-MM-DD."""

import os
from datetime import date

from dagster import DailyPartitionsDefinition

# The first day partition unless SAN_TIL_FIRST_DAY says otherwise. Recent on purpose: every day
# from it on shows as a partition, and a backfill of "all" missing days gives each of their
# active users a TIL; set it to the day the pipeline went live.
FIRST_TIL_DAY = date(2026, 11, 1)


class TilPartitionsConfigError(ValueError):
    pass


def first_til_day(today: date | None = None) -> date:
    """SAN_TIL_FIRST_DAY (YYYY-MM-DD, not in the future), default FIRST_TIL_DAY; else an error at
    load."""
    raw = (os.environ.get("SAN_TIL_FIRST_DAY") or "").strip()
    if not raw:
        return FIRST_TIL_DAY
    try:
        day = date.fromisoformat(raw)
    except ValueError:
        raise TilPartitionsConfigError(
            f"SAN_TIL_FIRST_DAY={raw!r} is not a date YYYY-MM-DD (the first TIL day partition)"
        ) from None
    if day > (today or date.today()):
        raise TilPartitionsConfigError(
            f"SAN_TIL_FIRST_DAY={raw!r} is in the future: there would be no TIL day to run"
        )
    return day


def til_partitions(timezone: str) -> DailyPartitionsDefinition:
    return DailyPartitionsDefinition(start_date=first_til_day().isoformat(), timezone=timezone)
