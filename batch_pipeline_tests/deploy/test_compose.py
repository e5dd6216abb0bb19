"""deploy/docker-compose.yml and deploy/dagster.compose.yaml, read as the tools read them:
who can reach what, the project's run queue, nothing secret inside."""

from pathlib import Path

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def load(name):
    return yaml.safe_load((DEPLOY / name).read_text())


def test_only_the_webserver_is_published_and_only_on_loopback():
    services = load("docker-compose.yml")["services"]
    published = {
        name: service["ports"] for name, service in services.items() if service.get("ports")
    }
    # the code server's gRPC port never is
    assert published == {"webserver": ["127.0.0.1:3000:3000"]}


def test_the_compose_instance_has_the_run_queue_monitoring_and_the_docker_run_launcher():
    instance, production = load("dagster.compose.yaml"), load("dagster.prod.yaml")
    assert instance["concurrency"] == production["concurrency"]
    assert instance["run_monitoring"] == production["run_monitoring"]
    assert instance["storage"] == production["storage"]
    assert (instance["run_launcher"]["module"], instance["run_launcher"]["class"]) == (
        "dagster_docker",
        "DockerRunLauncher",
    )
    # every SAN setting the code reads reaches each run's container
    passed_on = set(instance["run_launcher"]["config"]["env_vars"])
    assert {"SAN_DATABASE_URL", "SAN_JOB_DISPATCHER", "DAGSTER_PG_PASSWORD"} <= passed_on


def test_no_secret_is_written_into_the_deployment_files():
    compose = (DEPLOY / "docker-compose.yml").read_text()
    # from the environment only
    assert "${SAN_DATABASE_URL:?" in compose and "${DAGSTER_PG_PASSWORD:?" in compose
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert "SAN_DATABASE_URL" not in dockerfile.split("# The same image")[1]
    assert "USER dagster" in dockerfile


def test_docker_compose_accepts_the_file_and_refuses_to_start_without_the_secrets():
    import os
    import shutil
    import subprocess

    import pytest

    compose = ["docker-compose"] if shutil.which("docker-compose") else None
    if compose is None:
        pytest.skip("no docker-compose on this machine (.ci/run installs Debian's)")
    env = {
        **os.environ,
        "BATCH_PIPELINE_IMAGE": "batch-pipeline:test",
        "SAN_DATABASE_URL": "postgresql+psycopg://u@db/san",
        "DAGSTER_PG_PASSWORD": "secret",
    }
    config = subprocess.run(
        [*compose, "-f", str(DEPLOY / "docker-compose.yml"), "config"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert config.returncode == 0, config.stderr
    rendered = yaml.safe_load(config.stdout)
    assert (
        rendered["services"]["daemon"]["environment"]["SAN_DATABASE_URL"]
        == "postgresql+psycopg://u@db/san"
    )
    env.pop("SAN_DATABASE_URL")
    refused = subprocess.run(
        [*compose, "-f", str(DEPLOY / "docker-compose.yml"), "config"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode != 0 and "set SAN_DATABASE_URL" in refused.stderr
