"""deploy/prometheus and deploy/grafana: the alert rules pass their promtool tests, the configs
check, and every expression of the rules and the dashboard parses and names only metrics the
endpoint exports (Debian's prometheus and prometheus-alertmanager, installed by .ci/run)."""

import json
import re
import subprocess

import pytest
import yaml

from batch_pipeline.monitoring.exporter import EXPORTED_METRICS
from batch_pipeline_tests.processes import PROMETHEUS, ROOT, tool

DASHBOARD = ROOT / "deploy" / "grafana" / "batch_pipeline.json"
OURS = re.compile(r"\b(?:batch_pipeline|san)_[a-z0-9_]+\b")


def run(*command: str, cwd=PROMETHEUS) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def rule_expressions() -> list[str]:
    rules = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def dashboard_expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def test_the_alert_rules_pass_their_promtool_tests():
    assert "SUCCESS: 12 rules found" in run(tool("promtool"), "check", "rules", "alerts.yml")
    assert "SUCCESS" in run(tool("promtool"), "test", "rules", "alerts.test.yml")


def test_the_prometheus_and_alertmanager_configs_check():
    run(tool("promtool"), "check", "config", "prometheus.yml")
    run(tool("amtool"), "check-config", "alertmanager.yml")


@pytest.mark.parametrize("source", ["alerts.yml", "grafana"])
def test_every_expression_names_only_exported_metrics(source):
    expressions = rule_expressions() if source == "alerts.yml" else dashboard_expressions()
    named = {name for expression in expressions for name in OURS.findall(expression)}
    assert named, "no metric of ours found: the pattern is wrong"
    assert named <= set(EXPORTED_METRICS), named - set(EXPORTED_METRICS)


def test_every_dashboard_expression_parses(tmp_path):
    """Each expression as a recording rule, for promtool's own PromQL parser."""
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:panel_{i}", "expr": expression}
                    for i, expression in enumerate(dashboard_expressions())
                ],
            }
        ]
    }
    (tmp_path / "dashboard.yml").write_text(yaml.safe_dump(rules))
    out = run(tool("promtool"), "check", "rules", "dashboard.yml", cwd=tmp_path)
    assert f"SUCCESS: {len(dashboard_expressions())} rules found" in out
