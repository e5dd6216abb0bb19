"""The healer's watchdog: the recovery assets' freshness checks fail when no recovery ran for
too long, and pass right after a run."""

import pytest
from dagster import DagsterEventType, DagsterInstance

from batch_pipeline.definitions import defs
from batch_pipeline.recovery.freshness import STALE_AFTER, stale_after
from batch_pipeline.recovery.registry import AREAS
from batch_pipeline.san.resources import JobDispatcherResource, SanDatabase
from batch_pipeline_tests.recovery.test_jobs import run_recovery


def freshness(db, instance):
    result = defs.resolve_job_def("recovery_freshness_job").execute_in_process(
        instance=instance,
        raise_on_error=False,
        resources={
            "san_database": SanDatabase(url=db.url),
            "job_dispatcher": JobDispatcherResource(kind="none"),
        },
    )
    records = instance.get_records_for_run(
        result.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION
    ).records
    evaluations = [r.event_log_entry.dagster_event.event_specific_data for r in records]
    return {evaluation.asset_key.to_user_string(): evaluation.passed for evaluation in evaluations}


def test_no_recovery_run_fails_the_watchdog_and_a_run_makes_it_pass(san_db):
    instance = DagsterInstance.ephemeral()
    assert freshness(san_db, instance) == {area: False for area in AREAS}
    result, _ = run_recovery(san_db, instance=instance)
    assert result.success
    assert freshness(san_db, instance) == {area: True for area in AREAS}


def test_the_window_follows_the_environment_and_a_bad_value_names_itself(monkeypatch):
    assert stale_after() == STALE_AFTER
    monkeypatch.setenv("SAN_RECOVERY_FRESHNESS_HOURS", "12")
    assert stale_after().total_seconds() == 12 * 3600
    monkeypatch.setenv("SAN_RECOVERY_FRESHNESS_HOURS", "soon")
    with pytest.raises(ValueError, match="SAN_RECOVERY_FRESHNESS_HOURS='soon'"):
        stale_after()
