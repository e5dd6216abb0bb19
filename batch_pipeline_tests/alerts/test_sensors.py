"""Alerts: a failed run and a failed asset check are posted to the webhook, against a local
HTTP server that records the posts."""

from dagster import DagsterInstance, build_run_status_sensor_context

from batch_pipeline.alerts.slack import post_alert
from batch_pipeline.definitions import defs
from batch_pipeline.san.resources import JobDispatcherResource, SanDatabase
from batch_pipeline_tests.runs import run_failure_alert


def resources(url):
    return {
        "san_database": SanDatabase(url=url),
        "job_dispatcher": JobDispatcherResource(kind="none"),
    }


def test_a_failed_run_is_posted_with_job_run_step_and_link(webhook):
    instance = DagsterInstance.ephemeral()
    result = defs.resolve_job_def("recovery_job").execute_in_process(
        resources=resources("postgresql+psycopg://postgres@127.0.0.1:1/san"),
        instance=instance,
        raise_on_error=False,
    )
    assert not result.success
    run_failure_alert(result, instance)
    [post] = webhook
    assert "recovery_job" in post["text"] and result.run_id in post["text"]
    assert "check_san_database" in post["text"]
    assert f"https://dagster.san.example/runs/{result.run_id}" in post["text"]


def run_checks_then_alert_sensor(url):
    """A recovery run (its checks are evaluated in it), then the alert sensor on that run."""
    instance = DagsterInstance.ephemeral()
    result = defs.resolve_job_def("recovery_job").execute_in_process(
        resources=resources(url), instance=instance
    )
    context = build_run_status_sensor_context(
        sensor_name="asset_check_alert",
        dagster_event=result.get_run_success_event(),
        dagster_instance=instance,
        dagster_run=result.dagster_run,
    )
    defs.resolve_sensor_def("asset_check_alert")(context)
    return result


def test_a_failed_asset_check_is_posted(webhook, pg_db):
    result = run_checks_then_alert_sensor(pg_db.url)
    [post] = webhook
    assert (
        "recovery_indexes" in post["text"]
        and "WARN" in post["text"]
        and "ghost_job_recovery" in post["text"]
    )
    assert f"https://dagster.san.example/runs/{result.run_id}" in post["text"]


def test_passing_checks_post_nothing(webhook, san_db):
    from batch_pipeline.san.schema import create_recommended_indexes

    create_recommended_indexes(san_db.engine)
    run_checks_then_alert_sensor(san_db.url)
    assert webhook == []


def test_without_a_webhook_the_alert_is_logged(monkeypatch, caplog):
    monkeypatch.delenv("SAN_ALERT_WEBHOOK_URL", raising=False)
    assert post_alert("recovery_job failed") is False
    assert "SAN_ALERT_WEBHOOK_URL is not set; alert not posted: recovery_job failed" in caplog.text
