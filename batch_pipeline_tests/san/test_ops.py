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


def test_no_op_of_the_code_location_has_a_retry_policy():
    """Dagster turns an interrupt (Terminate, SIGTERM) into a retry of an op with a retry policy,
    and the retry writes on: ops ask for DATABASE_RETRY with `retried_on_error` instead."""
    from batch_pipeline.definitions import defs

    with_policy = [
        f"{job.name}.{node.name}"
        for job in defs.get_repository_def().get_all_jobs()
        for node in job.graph.iterate_op_defs()
        if node.retry_policy is not None
    ]
    assert with_policy == []
    assert all(job.op_retry_policy is None for job in defs.get_repository_def().get_all_jobs())


def test_an_error_asks_for_the_policy_s_next_try_and_an_interrupt_passes():
    from dagster import DagsterExecutionInterruptedError, job, op

    from batch_pipeline.san.ops import DATABASE_RETRY, retried_on_error

    def probe(error: BaseException):
        @op
        @retried_on_error
        def failing():
            raise error

        @job
        def probing():
            failing()

        return probing.execute_in_process(raise_on_error=False)

    retried = probe(OperationalError("SELECT 1", {}, ConnectionError("reset")))
    retries = [e for e in retried.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]
    assert len(retries) == DATABASE_RETRY.max_retries
    assert [e.event_specific_data.seconds_to_wait for e in retries] == [
        DATABASE_RETRY.calculate_delay(1),
        DATABASE_RETRY.calculate_delay(2),
    ]
    not_retried = probe(Failure("bad input", allow_retries=False))
    assert not [e for e in not_retried.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]
    interrupted = probe(DagsterExecutionInterruptedError())
    assert not [e for e in interrupted.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]
    assert [e.step_key for e in interrupted.all_events if e.is_step_failure] == ["failing"]
