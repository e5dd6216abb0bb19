"""An environment setting: read stripped, parsed within its bounds, refused by name."""

import pytest

from batch_pipeline.san.settings import Setting, SettingError

SETTING = Setting("BP_TEST_SETTING", "3", "a test setting")


def test_unset_or_blank_is_the_default(monkeypatch):
    monkeypatch.delenv("BP_TEST_SETTING", raising=False)
    assert SETTING.raw() is None and SETTING.whole_number(3, low=1, high=10) == 3
    monkeypatch.setenv("BP_TEST_SETTING", "   ")
    assert SETTING.raw() is None
    monkeypatch.setenv("BP_TEST_SETTING", " 7 ")
    assert SETTING.whole_number(3, low=1, high=10) == 7
    monkeypatch.setenv("BP_TEST_SETTING", "2.5")
    assert SETTING.number(1.0, low_exclusive=0, high=10) == 2.5


@pytest.mark.parametrize("value", ["100000000", "0", "-1", "soon", "1e3"])
def test_a_whole_number_out_of_range_or_not_one_names_the_variable_and_the_rule(monkeypatch, value):
    monkeypatch.setenv("BP_TEST_SETTING", value)
    with pytest.raises(
        SettingError, match=f"BP_TEST_SETTING='{value}' must be a whole number from 1 to 10"
    ):
        SETTING.whole_number(3, low=1, high=10)


@pytest.mark.parametrize("value", ["0", "nan", "inf", "soon", "11"])
def test_a_number_out_of_range_names_the_variable(monkeypatch, value):
    monkeypatch.setenv("BP_TEST_SETTING", value)
    with pytest.raises(SettingError, match=f"BP_TEST_SETTING='{value}' must be a number above 0"):
        SETTING.number(1.0, low_exclusive=0, high=10)
