"""The recovery cadence: one constant, the cron built from it, its period and next run."""

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim

from batch_pipeline.recovery.cadence import (
    RECOVERY_CRON,
    RECOVERY_PERIOD,
    CadenceError,
    next_run,
    period_of,
    recovery_cron,
)

SEOUL = "Asia/Seoul"


def test_the_designs_cron_is_built_from_its_period_and_has_it():
    assert RECOVERY_CRON == "0 0-22/2 * * *"
    assert period_of(RECOVERY_CRON, SEOUL) == RECOVERY_PERIOD


def test_the_designs_cron_ticks_when_every_2_hours_on_the_hour_would():
    """The hour range is for the UI's label (it names the zone); the ticks are the same."""
    start = datetime(2026, 12, 1, tzinfo=ZoneInfo(SEOUL))
    ours, plain = CronSim(RECOVERY_CRON, start), CronSim("0 */2 * * *", start)
    assert [next(ours) for _ in range(36)] == [next(plain) for _ in range(36)]


def test_the_period_is_the_longest_wait_between_two_runs():
    assert period_of("*/15 * * * *", SEOUL) == timedelta(minutes=15)
    assert period_of("0 3,9 * * *", SEOUL) == timedelta(hours=18)
    assert period_of("@daily", SEOUL) == timedelta(days=1)


def test_next_run_is_the_first_tick_after_an_instant_in_the_schedules_zone():
    after = datetime(2026, 12, 2, 1, 30, tzinfo=ZoneInfo(SEOUL))
    assert next_run(RECOVERY_CRON, SEOUL, after) == datetime(
        2026, 12, 2, 2, 0, tzinfo=ZoneInfo(SEOUL)
    )


def test_san_recovery_cron_overrides_and_an_invalid_one_is_named(monkeypatch):
    monkeypatch.setenv("SAN_RECOVERY_CRON", " */5 * * * * ")
    assert recovery_cron() == "*/5 * * * *"
    with pytest.raises(CadenceError, match="SAN_RECOVERY_CRON='every tuesday'"):
        period_of("every tuesday", SEOUL)
