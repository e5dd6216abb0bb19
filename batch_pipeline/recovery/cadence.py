"""How often recovery_job runs: the design's every 2 hours, or SAN_RECOVERY_CRON. The one place
the cadence is set; the schedule, the freshness watchdog, the fast lane's backoff ceiling and
`explain`'s "next run at" all read it here."""

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

from batch_pipeline.san.settings import Setting

# The design's cadence: every 2 hours, on the hour. Written as an hour range (the same ticks as
# `0 */2 * * *`) because Dagster's UI shows the schedule's zone only beside a time of day, and
# it humanizes a range with its times: "every 2 hours, between 12:00 AM GMT+9 and …".
RECOVERY_PERIOD = timedelta(hours=2)
_EVERY_HOURS = int(RECOVERY_PERIOD / timedelta(hours=1))
RECOVERY_CRON = f"0 0-{24 - _EVERY_HOURS}/{_EVERY_HOURS} * * *"

SAN_RECOVERY_CRON = Setting(
    "SAN_RECOVERY_CRON",
    RECOVERY_CRON,
    "period of `recovery_schedule` (an invalid cron is an error at load); the freshness "
    "watchdog's default follows it",
)

# Dagster's cron aliases, as five fields (cronsim reads only the fields).
ALIASES = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
# How far ahead the longest gap between two runs is looked for: a week covers weekday crons.
PERIOD_HORIZON = timedelta(days=8)
PERIOD_MAX_TICKS = 20_000


class CadenceError(ValueError):
    pass


def recovery_cron() -> str:
    return SAN_RECOVERY_CRON.raw() or RECOVERY_CRON


def _ticks(cron: str, timezone: str, after: datetime):
    try:
        return CronSim(ALIASES.get(cron, cron), after.astimezone(ZoneInfo(timezone)))
    except CronSimError as error:
        raise CadenceError(
            f"SAN_RECOVERY_CRON={cron!r} is not a valid cron expression (e.g. '{RECOVERY_CRON}')"
        ) from error


def next_run(cron: str, timezone: str, after: datetime) -> datetime:
    """The first tick of `cron` (in `timezone`) after `after`."""
    return next(_ticks(cron, timezone, after))


def period_of(cron: str, timezone: str, start: datetime | None = None) -> timedelta:
    """The longest wait between two runs of `cron` over the next week: how long a fragment can
    wait for recovery_job at worst."""
    start = start or datetime(2026, 1, 5, tzinfo=ZoneInfo(timezone))  # a Monday, no DST nearby
    ticks = _ticks(cron, timezone, start)
    previous, longest = next(ticks), timedelta(0)
    for _ in range(PERIOD_MAX_TICKS):
        tick = next(ticks)
        longest = max(longest, tick - previous)
        previous = tick
        if tick - start > PERIOD_HORIZON:
            break
    return longest
