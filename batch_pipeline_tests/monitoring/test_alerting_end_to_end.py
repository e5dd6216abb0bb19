"""Real parts, end to end: a production deployment (daemon, webserver, PostgreSQL storage), the
metrics endpoint beside it, Debian's Prometheus scraping it with deploy/prometheus/alerts.yml,
and Debian's Alertmanager routing to a local webhook. 37 ghosts show, then 0 after a
recovery_job run; then the daemon is killed and "healer down" reaches the webhook.

The test's Prometheus scrapes and evaluates every 2 s and the rules' `for:` are 0 s (but the
endpoint-down rule's: Prometheus' own startup is no alert); the thresholds are the shipped
ones."""

import json
import signal
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
import yaml

from batch_pipeline.recovery.assets import recovery_run_config
from batch_pipeline.san.tables import CARD_ANALYSIS, FAILED, PENDING
from batch_pipeline_tests.processes import (
    BIN,
    PROMETHEUS,
    free_port,
    production_deployment,
    start,
    submit_through_webserver,
    tool,
    wait_for_status,
)
from san_sandbox.processes import stop_group, wait_for

pytestmark = pytest.mark.system  # runs a deployment, Prometheus and Alertmanager

GHOSTS = 37
# The shipped rule needs 120 s without a heartbeat (the daemon beats every 30 s): the alert can
# only come 90-120 s after the kill; 5 minutes is what SAN's team was promised.
ALERT_WITHIN_S = 300


class Receiver:
    """Alertmanager's webhook receiver: every alert it was sent, as (labels, status)."""

    def __init__(self):
        self.alerts: list[tuple[dict, str]] = []
        received = self.alerts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                received.extend((alert["labels"], alert["status"]) for alert in body["alerts"])
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def firing(self, alertname: str) -> list[dict]:
        return [
            labels
            for labels, status in self.alerts
            if labels["alertname"] == alertname and status == "firing"
        ]


def rules_with_every_for_zero(folder) -> str:
    rules = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule.get("labels", {}).get("cause") != "metrics_endpoint_down":
                rule["for"] = "0s"
    (folder / "alerts.yml").write_text(yaml.safe_dump(rules))
    return "alerts.yml"


def query(prometheus_port: int, expression: str) -> list:
    url = f"http://127.0.0.1:{prometheus_port}/api/v1/query?" + urllib.parse.urlencode(
        {"query": expression}
    )
    with urllib.request.urlopen(url, timeout=5) as page:
        return json.load(page)["data"]["result"]


def stale_ghosts(prometheus_port: int) -> float | None:
    found = query(prometheus_port, 'sum(san_jobs_stale{job_type="CARD_ANALYSIS"})')
    return float(found[0]["value"][1]) if found else None


def test_ghosts_show_then_heal_and_a_dead_daemon_reaches_the_webhook(
    tmp_path, pg_db, dagster_pg_storage
):
    ghosts = [
        pg_db.job(CARD_ANALYSIS, target, PENDING, created_at=pg_db.ago(minutes=45))
        for target in range(GHOSTS)
    ]
    receiver = Receiver()
    metrics_port, prometheus_port, alertmanager_port = free_port(), free_port(), free_port()
    (tmp_path / "alertmanager.yml").write_text(
        yaml.safe_dump(
            {
                "route": {
                    "receiver": "test",
                    "group_by": ["alertname", "cause"],
                    "group_wait": "1s",
                    "group_interval": "5s",
                },
                "receivers": [
                    {
                        "name": "test",
                        "webhook_configs": [{"url": f"http://127.0.0.1:{receiver.port}/"}],
                    }
                ],
            }
        )
    )
    (tmp_path / "prometheus.yml").write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "2s", "evaluation_interval": "2s"},
                "rule_files": [rules_with_every_for_zero(tmp_path)],
                "alerting": {
                    "alertmanagers": [
                        {"static_configs": [{"targets": [f"127.0.0.1:{alertmanager_port}"]}]}
                    ]
                },
                "scrape_configs": [
                    {
                        "job_name": "batch_pipeline",
                        "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}],
                    }
                ],
            }
        )
    )
    log = open(tmp_path / "monitoring.log", "w")
    parts = []
    try:
        parts.append(
            start(
                [
                    tool("prometheus-alertmanager"),
                    f"--config.file={tmp_path / 'alertmanager.yml'}",
                    f"--storage.path={tmp_path / 'alertmanager'}",
                    f"--web.listen-address=127.0.0.1:{alertmanager_port}",
                    "--cluster.listen-address=",
                ],
                {},
                log,
            )
        )
        parts.append(
            start(
                [
                    tool("prometheus"),
                    f"--config.file={tmp_path / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp_path / 'prometheus'}",
                    f"--web.listen-address=127.0.0.1:{prometheus_port}",
                ],
                {},
                log,
            )
        )
        with production_deployment(tmp_path, pg_db, dagster_pg_storage) as deployment:
            endpoint = [
                str(BIN / "python"),
                "-m",
                "batch_pipeline",
                "metrics",
                "--port",
                str(metrics_port),
                "--cache-seconds",
                "1",
            ]
            parts.append(start(endpoint, deployment.env, log))

            assert wait_for(lambda: stale_ghosts(prometheus_port) == GHOSTS, 120, "37 ghosts")

            run_id = submit_through_webserver(
                deployment.port, "recovery_job", recovery_run_config()
            )
            assert wait_for_status(deployment.port, run_id, ("SUCCESS", "FAILURE"), 240) == (
                "SUCCESS"
            )
            assert all(pg_db.get_job(ghost).status == FAILED for ghost in ghosts)
            assert wait_for(lambda: stale_ghosts(prometheus_port) == 0, 60, "0 ghosts")
            # audit_index_sensor folds the run's audit within its 30 s interval
            healed = 'batch_pipeline_healed_total{area="ghost_job_recovery"}'
            wait_for(
                lambda: (
                    (found := query(prometheus_port, healed))
                    and float(found[0]["value"][1]) == GHOSTS
                ),
                90,
                "the 37 heals counted",
            )
            assert not receiver.firing("BatchPipelineHealerDown"), receiver.alerts

            stop_group(deployment.daemon, signal.SIGKILL)  # the daemon and its threads, at once
            killed_at = time.monotonic()
            wait_for(
                lambda: receiver.firing("BatchPipelineHealerDown"),
                ALERT_WITHIN_S,
                "the healer-down alert at the webhook",
                every_s=1,
            )
            took = time.monotonic() - killed_at
            causes = {labels["cause"] for labels in receiver.firing("BatchPipelineHealerDown")}
            print(f"healer down reached the webhook {took:.0f} s after the kill: {causes}")
            assert causes & {"daemon_dead", "fast_lane_not_ticking"}, causes
    finally:
        for part in reversed(parts):
            stop_group(part)
        log.close()
        receiver.server.shutdown()
