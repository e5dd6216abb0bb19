"""What every job's ops share: which errors are retried, the metadata helpers."""

import pytest
from dagster import Failure, MetadataValue
from sqlalchemy.exc import OperationalError, ProgrammingError

from batch_pipeline.san.ops import as_metadata, is_transient, retried_only_if_transient


def test_only_connection_level_and_contention_faults_count_as_transient():
    class Orig(Exception):
        def __init__(self, sqlstate):
            self.sqlstate = sqlstate

    def pg_error(cls, sqlstate):
        return cls("SELECT 1", {}, Orig(sqlstate))

    assert is_transient(pg_error(OperationalError, "57P01"))  # admin shutdown: a killed connection
    assert is_transient(pg_error(OperationalError, "55P03"))  # lock_timeout
    assert is_transient(pg_error(OperationalError, "40P01"))  # deadlock
    assert not is_transient(pg_error(ProgrammingError, "42501"))  # insufficient privilege
    assert not is_transient(pg_error(ProgrammingError, "42703"))  # undefined column
    assert not is_transient(pg_error(OperationalError, "25006"))  # read-only transaction
    assert is_transient(ConnectionError("connection reset"))
    assert not is_transient(ValueError("a bug"))


def test_a_deterministic_error_becomes_a_failure_that_names_it_and_is_not_retried():
    class Orig(Exception):
        sqlstate = "42501"

        def __str__(self):
            return "permission denied for table jobs\nDETAIL: more"

    with pytest.raises(Failure) as failure, retried_only_if_transient():
        raise ProgrammingError("SELECT 1", {}, Orig())
    assert failure.value.description.startswith(
        "Orig (SQLSTATE 42501): permission denied for table jobs. Not retried"
    )
    assert failure.value.allow_retries is False

    class Lost(Exception):
        sqlstate = "08006"  # connection failure

    with pytest.raises(OperationalError), retried_only_if_transient():  # left to the retry policy
        raise OperationalError("SELECT 1", {}, Lost())


def test_numbers_stay_numbers_and_lists_become_json():
    metadata = as_metadata({"enqueued": 3, "ids": [1, 2], "thresholds": {"a": 1}, "dry_run": False})
    assert metadata["enqueued"] == 3 and metadata["dry_run"] is False
    assert metadata["ids"] == MetadataValue.json([1, 2])
    assert metadata["thresholds"] == MetadataValue.json({"a": 1})
