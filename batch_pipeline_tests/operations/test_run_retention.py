"""run_retention_job deletes finished runs older than keep_days, never the running one."""

from dagster import DagsterInstance

from batch_pipeline.definitions import defs


def test_old_finished_runs_are_deleted_and_recent_ones_kept():
    instance = DagsterInstance.ephemeral()
    retention = defs.resolve_job_def("run_retention_job")
    kept = retention.execute_in_process(instance=instance, run_config={"ops": {"delete_old_runs": {"config": {"keep_days": 30}}}})
    assert instance.get_run_by_id(kept.run_id) is not None  # younger than 30 days
    purge = retention.execute_in_process(instance=instance, run_config={"ops": {"delete_old_runs": {"config": {"keep_days": 0}}}})
    assert instance.get_run_by_id(kept.run_id) is None
    assert instance.get_run_by_id(purge.run_id) is not None  # the purging run itself stays


def test_the_schedule_runs_daily():
    schedule = defs.resolve_schedule_def("run_retention_schedule")
    assert schedule.cron_schedule == "30 4 * * *" and schedule.job_name == "run_retention_job"
