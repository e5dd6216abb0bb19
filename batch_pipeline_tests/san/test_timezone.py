"""SAN's calendar time zone: Asia/Seoul unless SAN_TIMEZONE says otherwise; an unknown one is
named."""

import pytest

from batch_pipeline.san.timezone import DEFAULT_TIMEZONE, TimezoneConfigError, san_timezone_name


def test_the_default_a_setting_and_an_unknown_zone(monkeypatch):
    monkeypatch.delenv("SAN_TIMEZONE", raising=False)
    assert san_timezone_name() == DEFAULT_TIMEZONE == "Asia/Seoul"
    monkeypatch.setenv("SAN_TIMEZONE", " Europe/Berlin ")
    assert san_timezone_name() == "Europe/Berlin"
    monkeypatch.setenv("SAN_TIMEZONE", "Mars/Olympus_Mons")
    with pytest.raises(TimezoneConfigError, match="SAN_TIMEZONE='Mars/Olympus_Mons'"):
        san_timezone_name()
