"""The one-host units (deploy/systemd): systemd itself accepts them, each stops with
KillMode=mixed and reads the one environment file, and that file names only real settings."""

import configparser
import re
import subprocess
from pathlib import Path

import pytest

from batch_pipeline.settings import SETTINGS
from batch_pipeline_tests.known_names import DAGSTER_VARIABLES

ROOT = Path(__file__).resolve().parents[2]
UNITS = sorted((ROOT / "deploy" / "systemd").glob("*.service"))
INSTALLED_AT = "/srv/batch_pipeline"


def unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    parser.read_string(path.read_text())
    return parser


def test_there_is_a_unit_for_the_webserver_the_daemon_and_the_metrics_endpoint():
    names = [path.name for path in UNITS]
    assert names == [
        f"batch-pipeline-{name}.service" for name in ("daemon", "metrics", "webserver")
    ]


@pytest.mark.parametrize("path", UNITS, ids=lambda path: path.name)
def test_each_unit_stops_mixed_and_reads_the_environment_file(path):
    service = unit(path)["Service"]
    assert service["KillMode"] == "mixed"
    assert service["EnvironmentFile"] == "/etc/batch_pipeline/env"
    assert service["User"] == "batch_pipeline"  # never root
    assert service["ExecStart"].startswith(f"{INSTALLED_AT}/.venv/bin/")


def test_the_metrics_endpoint_listens_on_this_host_only_as_documented():
    exec_start = unit(ROOT / "deploy" / "systemd" / "batch-pipeline-metrics.service")["Service"]
    assert "--host 127.0.0.1 " in exec_start["ExecStart"]


@pytest.mark.parametrize("path", UNITS, ids=lambda path: path.name)
def test_systemd_accepts_each_unit_where_the_checkout_is_installed(path, tmp_path):
    """systemd-analyze verify: every directive known, every executable there (this checkout's
    venv standing in for /srv/batch_pipeline)."""
    copy = tmp_path / path.name
    copy.write_text(path.read_text().replace(INSTALLED_AT, str(ROOT)))
    verified = subprocess.run(
        ["systemd-analyze", "verify", str(copy)], capture_output=True, text=True, timeout=60
    )
    assert verified.returncode == 0, verified.stderr


def test_the_environment_file_names_only_real_settings_and_what_every_run_needs():
    text = (ROOT / "deploy" / "systemd" / "batch-pipeline.env").read_text()
    names = set(re.findall(r"^([A-Z][A-Z0-9_]*)=", text, re.M))
    assert names <= {setting.name for setting in SETTINGS} | DAGSTER_VARIABLES
    assert {"SAN_DATABASE_URL", "DAGSTER_HOME", "DAGSTER_PG_HOST", "DAGSTER_PG_DB"} <= names
