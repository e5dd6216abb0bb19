"""Posting an alert: the run link from SAN_DAGSTER_BASE_URL, never an exception."""

from batch_pipeline.alerts.slack import post_alert, run_link


def test_the_run_link_uses_the_uis_address(monkeypatch):
    monkeypatch.delenv("SAN_DAGSTER_BASE_URL", raising=False)
    assert run_link("abc") == "http://127.0.0.1:3000/runs/abc"
    monkeypatch.setenv("SAN_DAGSTER_BASE_URL", "https://dagster.san.example/")
    assert run_link("abc") == "https://dagster.san.example/runs/abc"


def test_an_unreachable_webhook_is_logged_not_raised(caplog):
    assert post_alert("hello", webhook_url="http://127.0.0.1:9/hook", timeout_s=2) is False
    assert "could not post the alert" in caplog.text
