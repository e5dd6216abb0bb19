"""run_retention_job deletes finished runs older than keep_days, never the running one."""

from datetime import UTC, datetime, timedelta

import pytest
from dagster import DagsterInstance, build_schedule_context

from batch_pipeline.definitions import build_definitions, defs
from batch_pipeline.operations.run_retention import RetentionConfigError


def test_old_finished_runs_are_deleted_and_recent_ones_kept():
    instance = DagsterInstance.ephemeral()
    retention = defs.resolve_job_def("run_retention_job")
    kept = retention.execute_in_process(
        instance=instance, run_config={"ops": {"delete_old_runs": {"config": {"keep_days": 30}}}}
    )
    assert instance.get_run_by_id(kept.run_id) is not None  # younger than 30 days
    purge = retention.execute_in_process(
        instance=instance, run_config={"ops": {"delete_old_runs": {"config": {"keep_days": 0}}}}
    )
    assert instance.get_run_by_id(kept.run_id) is None
    assert instance.get_run_by_id(purge.run_id) is not None  # the purging run itself stays


def test_the_schedule_runs_daily():
    schedule = defs.resolve_schedule_def("run_retention_schedule")
    assert schedule.cron_schedule == "30 4 * * *" and schedule.job_name == "run_retention_job"


def test_the_retention_horizon_is_dagster_run_retention_days(monkeypatch):
    # It is also the audit trail's horizon: the materializations live in the runs' event logs.
    monkeypatch.setenv("DAGSTER_RUN_RETENTION_DAYS", "400")
    built = build_definitions()
    instance = DagsterInstance.ephemeral()
    schedule = built.resolve_schedule_def("run_retention_schedule")
    [request] = schedule.evaluate_tick(build_schedule_context(instance=instance)).run_requests
    result = built.resolve_job_def("run_retention_job").execute_in_process(
        instance=instance, run_config=request.run_config
    )
    assert result.success
    [message] = [
        entry.user_message
        for entry in instance.all_logs(result.run_id)
        if "created before" in entry.user_message
    ]
    cutoff = datetime.fromisoformat(message.split("created before ")[1])
    assert abs((datetime.now(UTC) - cutoff) - timedelta(days=400)) < timedelta(minutes=1)
    assert "400 days" in schedule.description
    for wrong in ("ninety", "0", "-5"):
        monkeypatch.setenv("DAGSTER_RUN_RETENTION_DAYS", wrong)
        with pytest.raises(RetentionConfigError, match=f"DAGSTER_RUN_RETENTION_DAYS='{wrong}'"):
            build_definitions()
