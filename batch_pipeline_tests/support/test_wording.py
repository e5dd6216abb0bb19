"""Instants, durations and long texts as a story says them."""

from datetime import UTC, datetime, timedelta

from batch_pipeline.support.wording import age, at, shorten


def test_an_instant_is_said_in_utc_to_the_second():
    assert at(datetime(2026, 12, 3, 9, 5, 7, 999, tzinfo=UTC)) == "2026-12-03 09:05:07 UTC"


def test_a_duration_is_said_in_the_unit_people_use():
    assert age(timedelta(seconds=-3)) == "0 s"
    assert age(timedelta(seconds=119)) == "119 s"
    assert age(timedelta(minutes=45)) == "45 min"
    assert age(timedelta(hours=5, minutes=7)) == "5 h 7 min"
    assert age(timedelta(days=3, hours=4, minutes=59)) == "3 d 4 h"


def test_a_long_error_becomes_one_short_line():
    assert shorten(None) == "" and shorten("") == ""
    assert shorten("AI 500:\n  model   overloaded") == "AI 500: model overloaded"
    cut = shorten("x" * 200, limit=10)
    assert cut == "x" * 9 + "…" and len(cut) == 10
