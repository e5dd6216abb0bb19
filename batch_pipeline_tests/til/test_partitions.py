"""TIL partitions: one per day from SAN_TIL_FIRST_DAY, in SAN's time zone."""

import pytest

from batch_pipeline.definitions import build_definitions
from batch_pipeline.til.partitions import FIRST_TIL_DAY, TilPartitionsConfigError


def test_the_first_til_day_is_recent_by_default_and_a_setting(monkeypatch):
    monkeypatch.delenv("SAN_TIL_FIRST_DAY", raising=False)
    partitions = build_definitions().resolve_job_def("til_auto_generation_job").partitions_def
    first = partitions.get_first_partition_key()
    assert first == FIRST_TIL_DAY.isoformat()
    monkeypatch.setenv("SAN_TIL_FIRST_DAY", "2026-11-20")
    assert (
        build_definitions()
        .resolve_job_def("til_auto_generation_job")
        .partitions_def.get_first_partition_key()
        == "2026-11-20"
    )
    for wrong, named in (
        ("20.11.2026", "is not a date YYYY-MM-DD"),
        ("2999-01-01", "is in the future"),
        ("0001-01-01", "is before 2000-01-01"),
    ):
        monkeypatch.setenv("SAN_TIL_FIRST_DAY", wrong)
        with pytest.raises(TilPartitionsConfigError, match=f"SAN_TIL_FIRST_DAY='{wrong}' {named}"):
            build_definitions()
