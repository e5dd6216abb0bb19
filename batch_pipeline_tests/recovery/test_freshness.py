"""The healer's watchdog: the recovery assets' freshness checks fail when no recovery ran for
too long, and pass right after a run."""

from datetime import timedelta

import pytest
from dagster import DagsterEventType, DagsterInstance

from batch_pipeline.definitions import defs
from batch_pipeline.recovery.cadence import RECOVERY_PERIOD
from batch_pipeline.recovery.freshness import FRESHNESS_OP, PERIODS_BEFORE_STALE, stale_after
from batch_pipeline.recovery.registry import AREAS
from batch_pipeline.san.resources import JobDispatcherResource, SanDatabase
from batch_pipeline_tests.runs import run_recovery


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


def test_the_watchdog_s_op_has_a_name_an_operator_can_read():
    """Dagster's factory names it freshness_check_<hash>: the Launchpad showed that."""
    job = defs.resolve_job_def("recovery_freshness_job")
    assert [node.name for node in job.nodes] == [FRESHNESS_OP] == ["recovery_freshness"]


def test_the_window_follows_the_environment_and_a_bad_value_names_itself(monkeypatch):
    monkeypatch.delenv("SAN_RECOVERY_CRON", raising=False)
    monkeypatch.delenv("SAN_RECOVERY_FRESHNESS_HOURS", raising=False)
    assert stale_after("Asia/Seoul") == PERIODS_BEFORE_STALE * RECOVERY_PERIOD  # 4 h
    monkeypatch.setenv("SAN_RECOVERY_FRESHNESS_HOURS", "12")
    assert stale_after("Asia/Seoul").total_seconds() == 12 * 3600
    for wrong in ("soon", "0", "100000000"):
        monkeypatch.setenv("SAN_RECOVERY_FRESHNESS_HOURS", wrong)
        with pytest.raises(ValueError, match=f"SAN_RECOVERY_FRESHNESS_HOURS='{wrong}'"):
            stale_after("Asia/Seoul")


def test_the_windows_default_follows_the_recovery_cron(monkeypatch):
    monkeypatch.delenv("SAN_RECOVERY_FRESHNESS_HOURS", raising=False)
    monkeypatch.setenv("SAN_RECOVERY_CRON", "*/15 * * * *")
    assert stale_after("Asia/Seoul") == timedelta(minutes=30)
    monkeypatch.setenv("SAN_RECOVERY_CRON", "0 9 * * 1-5")  # weekdays: the weekend gap counts
    assert stale_after("Asia/Seoul") == 2 * timedelta(days=3)
