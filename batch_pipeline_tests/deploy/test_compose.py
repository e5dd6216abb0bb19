"""deploy/docker-compose.yml and deploy/dagster.compose.yaml, read as the tools read them:
who can reach what, the project's run queue, nothing secret inside."""

import os
import shutil
import subprocess

import pytest
import yaml

from batch_pipeline_tests.deploy.docker import DEPLOY, deploy_file, launcher_env_vars


def test_only_the_webserver_and_the_metrics_are_published_and_only_on_loopback():
    services = deploy_file("docker-compose.yml")["services"]
    published = {
        name: service["ports"] for name, service in services.items() if service.get("ports")
    }
    # the code server's gRPC port never is
    assert published == {
        "webserver": ["127.0.0.1:3000:3000"],
        "metrics": ["127.0.0.1:9464:9464"],
    }


def test_the_compose_instance_has_the_run_queue_monitoring_and_the_docker_run_launcher():
    instance, production = deploy_file("dagster.compose.yaml"), deploy_file("dagster.prod.yaml")
    assert instance["concurrency"] == production["concurrency"]
    assert instance["run_monitoring"] == production["run_monitoring"]
    assert instance["storage"] == production["storage"]
    assert (instance["run_launcher"]["module"], instance["run_launcher"]["class"]) == (
        "dagster_docker",
        "DockerRunLauncher",
    )


DAGSTER_STORAGE = {f"DAGSTER_PG_{name}" for name in ("HOST", "PORT", "USER", "PASSWORD", "DB")}


def run_settings() -> set[str]:
    """Every setting a run reads (all but SAN_DATA_DIR, the embedded default's folder, unused
    once SAN_DATABASE_URL is set, as compose requires)."""
    from batch_pipeline.san.database import SAN_DATA_DIR
    from batch_pipeline.settings import SETTINGS

    return {setting.name for setting in SETTINGS if setting is not SAN_DATA_DIR}


def test_every_setting_reaches_the_code_server_the_daemon_and_each_run_s_container():
    """A run loads the code location again: a setting the code server sees and the run does not
    (SAN_RECOVERY_CRON, SAN_TIL_FIRST_DAY...) would give the run other definitions."""
    passed_on = set(launcher_env_vars())
    assert passed_on == run_settings() | DAGSTER_STORAGE
    compose = deploy_file("docker-compose.yml")
    for name in ("code-server", "webserver", "daemon"):
        environment = compose["services"][name]["environment"]
        # the launcher reads each from the daemon's (and, to stop a run, the webserver's) own
        assert passed_on <= set(environment), (name, passed_on - set(environment))


def test_each_service_has_a_health_check_of_its_own_and_the_image_none():
    services = deploy_file("docker-compose.yml")["services"]
    one_shot = {"dagster-migrate"}  # `dagster instance migrate`, then it exits
    assert all("healthcheck" in services[name] for name in set(services) - one_shot)
    assert services["webserver"]["depends_on"]["dagster-migrate"] == {
        "condition": "service_completed_successfully"
    }
    assert "grpc-health-check" in str(services["code-server"]["healthcheck"]["test"])
    assert "/server_info" in str(services["webserver"]["healthcheck"]["test"])
    assert "liveness-check" in str(services["daemon"]["healthcheck"]["test"])
    assert ":9464/metrics" in str(services["metrics"]["healthcheck"]["test"])
    # inherited by the webserver, the daemon and every run container otherwise
    assert "HEALTHCHECK" not in (DEPLOY / "Dockerfile").read_text().replace("No HEALTHCHECK", "")


def test_the_socket_holders_are_the_image_s_user_with_the_socket_s_group():
    """The daemon starts run containers, and the webserver stops one when an operator presses
    Terminate (1.13: GraphQL -> QueuedRunCoordinator.cancel_run -> DockerRunLauncher.terminate,
    in the webserver's own process)."""
    services = deploy_file("docker-compose.yml")["services"]
    for name in ("webserver", "daemon"):
        service = services[name]
        assert "/var/run/docker.sock:/var/run/docker.sock" in service["volumes"]
        assert service["group_add"] == [
            "${DOCKER_GID:?set DOCKER_GID to the Docker socket's group: stat -c %g "
            "/var/run/docker.sock}"
        ]
        assert "user" not in service
    assert not any("docker.sock" in str(services[name].get("volumes")) for name in ("code-server",))
    daemon = services["daemon"]
    assert daemon["init"] is True and "kill -TERM 1" in str(daemon["healthcheck"]["test"])
    assert int(daemon["environment"]["DAGSTER_DAEMON_HEARTBEAT_TOLERANCE"]) < 1800


def daemon_health_check(tmp_path, grace_s: int | None = None) -> subprocess.CompletedProcess:
    """The daemon's health check as Docker runs it, with a liveness check that fails, in a PID
    namespace of its own whose PID 1 (the shell itself, as Docker's init in the container) says
    when it is sent SIGTERM; `grace_s` replaces the check's grace."""
    test = deploy_file("docker-compose.yml")["services"]["daemon"]["healthcheck"]["test"]
    assert test[0] == "CMD-SHELL"
    command = test[1].replace("$$", "$")  # compose's escape for a literal $
    if grace_s is not None:
        command = command.replace("-lt 120", f"-lt {grace_s}")
    (tmp_path / "dagster-daemon").write_text("#!/bin/sh\necho 'Daemon(s) not running'; exit 1\n")
    (tmp_path / "dagster-daemon").chmod(0o755)
    script = f"trap 'echo stopped by the health check; exit 143' TERM; {command}"
    return subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", script],
        env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare"
)
def test_the_daemon_s_health_check_stops_it_only_after_its_start_period(tmp_path):
    """A daemon still starting has sent no heartbeat: stopping it then would restart it over and
    over on a slow host. The check's grace is the service's start_period."""
    daemon = deploy_file("docker-compose.yml")["services"]["daemon"]
    assert daemon["healthcheck"]["start_period"] == "120s"
    young = daemon_health_check(tmp_path)
    assert (young.returncode, young.stdout) == (1, "Daemon(s) not running\n"), young
    old = daemon_health_check(tmp_path, grace_s=-1)  # as if the container were older
    assert old.returncode == 143 and "stopped by the health check" in old.stdout, old


def test_no_secret_is_written_into_the_deployment_files():
    compose = (DEPLOY / "docker-compose.yml").read_text()
    # from the environment only
    assert "${SAN_DATABASE_URL:?" in compose and "${DAGSTER_PG_PASSWORD:?" in compose
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert "SAN_DATABASE_URL" not in dockerfile.split("# The same image")[1]
    assert "USER 10001:10001" in dockerfile  # numeric: runAsNonRoot can verify it


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
        "DOCKER_GID": "999",
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
