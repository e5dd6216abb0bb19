"""deploy/docker-compose.yml brought up for real and driven as an operator would: the services'
health checks pass, recovery_job launched through the webserver runs in a container of its own
and records the recovered ids, Terminate in the webserver stops a run's container, a restarted
daemon starts the queued runs, a new image tag of the code server is what the next run
uses while the run in flight finishes on the old one, and a run whose container is killed is
failed by the daemon's run monitoring, freeing the queue for the run behind it.

This machine's Docker has no bridge network (`dockerd --bridge=none`), so the compose network
cannot exist: the test runs the shipped file minus the network (host_network_variant: every
service on the host's network, the ports moved to free ones), and prints what it changed.
Docker Hub is not reachable either: `postgres:15` is a local stand-in where the real one is
absent (docker.py says which). Skipped only where no Docker engine or docker-compose runs.
"""

import copy
import os
import shutil
import subprocess
import time
import urllib.request
import uuid

import psycopg
import pytest
import yaml
from dagster import AssetKey, DagsterInstance

from batch_pipeline.recovery.assets import recovery_run_config
from batch_pipeline.san.tables import CARD_ANALYSIS, FAILED, PENDING
from batch_pipeline_tests.deploy.docker import (
    IMAGE,
    built_image,
    docker,
    postgres_image,
    remove_run_containers,
)
from batch_pipeline_tests.processes import (
    ROOT,
    free_port,
    graphql_client,
    launch_through_webserver,
    submit_through_webserver,
    wait_for_status,
)
from san_sandbox.processes import wait_for

pytestmark = pytest.mark.system  # brings the compose deployment up in Docker

SHIPPED = ROOT / "deploy" / "docker-compose.yml"
ROLLOUT_IMAGE = "batch-pipeline:test-rollout"
PG_PASSWORD = "compose-test"
ENDED = ("SUCCESS", "FAILURE", "CANCELED")


def host_network_variant(
    shipped: dict, pg_port: int, grpc_port: int, web_port: int, metrics_port: int
):
    """The shipped file on the host's network: (the variant, what changed, in words)."""
    variant = copy.deepcopy(shipped)
    changes = []

    def change(what: str):
        changes.append(what)

    variant.pop("networks")
    change("networks: removed (no bridge network on this machine)")
    services = variant["services"]
    for name, service in services.items():
        service.pop("networks", None)
        service["network_mode"] = "host"
        if service.pop("ports", None):
            change(f"{name}: ports removed (on the host's network it listens on 127.0.0.1)")
    change("every service: network_mode host")
    for name in ("dagster-migrate", "code-server", "webserver", "daemon", "metrics"):
        services[name]["environment"] = env = dict(services[name]["environment"])
        env.update(
            {
                "DAGSTER_PG_HOST": "127.0.0.1",
                "DAGSTER_PG_PORT": str(pg_port),
                "DAGSTER_CODE_SERVER_HOST": "127.0.0.1",
                "DAGSTER_CODE_SERVER_PORT": str(grpc_port),
                "DAGSTER_RUN_NETWORK": "host",
            }
        )
    change(
        f"Dagster's PostgreSQL at 127.0.0.1:{pg_port}, the code server at 127.0.0.1:{grpc_port}, "
        "the runs on the host's network (the launcher's `network: host`)"
    )
    postgres = services["dagster-postgres"]
    postgres["command"] = ["-c", "listen_addresses=127.0.0.1", "-p", str(pg_port)]
    postgres["healthcheck"]["test"] = ["CMD-SHELL", f"pg_isready -U dagster -p {pg_port}"]
    change(f"dagster-postgres: listens on 127.0.0.1:{pg_port}; its health check asks that port")
    services["code-server"]["environment"].update({"PORT": str(grpc_port), "HOST": "127.0.0.1"})
    change(f"code-server: serves on 127.0.0.1:{grpc_port}")
    served = (("webserver", 3000, web_port), ("metrics", 9464, metrics_port))
    for name, shipped_port, port in served:
        service, health_check = services[name], services[name]["healthcheck"]
        service["command"] = [
            {"0.0.0.0": "127.0.0.1", str(shipped_port): str(port)}.get(part, part)
            for part in service["command"]
        ]
        health_check["test"] = [
            part.replace(f":{shipped_port}/", f":{port}/") for part in health_check["test"]
        ]
        change(f"{name}: serves on 127.0.0.1:{port}; its health check asks that port")
    return variant, changes


def container_of(project: str, service: str) -> str:
    return docker(
        "ps", "-aq", "--filter", f"label=com.docker.compose.project={project}",
        "--filter", f"label=com.docker.compose.service={service}",
    ).stdout.split()[0]  # fmt: skip


def health(container: str) -> str:
    return docker(
        "inspect", "-f", "{{.State.Health.Status}}", container, check=False
    ).stdout.strip()


def running(container: str) -> bool:
    state = docker("inspect", "-f", "{{.State.Running}}", container, check=False).stdout.strip()
    return state == "true"


def run_tags(instance: DagsterInstance, run_id: str) -> dict:
    return dict(instance.get_run_by_id(run_id).tags)


def held_lock(db):
    """A transaction holding SAN's jobs table: a recovery run waits on it (a long run)."""
    conn = psycopg.connect(db.url.replace("postgresql+psycopg://", "postgresql://"))
    conn.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
    return conn


LONG_RUN = recovery_run_config({"lock_timeout_ms": 600_000, "statement_timeout_ms": 900_000})


# A first build on a new machine makes the base image (debootstrap), the wheelhouse, the image
# and the PostgreSQL stand-in.
@pytest.mark.timeout(2400)
def test_compose_up_runs_terminates_survives_a_daemon_restart_rolls_out_and_fails_a_dead_run(
    tmp_path, pg_db, monkeypatch
):
    if shutil.which("docker-compose") is None:
        pytest.skip("no docker-compose on this machine (.ci/run installs Debian's)")
    built_image(tmp_path)
    print(f"postgres:15 is {postgres_image(tmp_path)}")
    pg_port, grpc_port, web_port, metrics_port = free_port(), free_port(), free_port(), free_port()
    variant, changes = host_network_variant(
        yaml.safe_load(SHIPPED.read_text()), pg_port, grpc_port, web_port, metrics_port
    )
    print("The shipped deploy/docker-compose.yml, changed for this machine:")
    print("\n".join(f"  - {line}" for line in changes))
    compose_file = tmp_path / "docker-compose.yml"
    compose_file.write_text(yaml.safe_dump(variant, sort_keys=False))
    project = f"bptest{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "BATCH_PIPELINE_IMAGE": IMAGE,
        "SAN_DATABASE_URL": pg_db.url,
        "DAGSTER_PG_PASSWORD": PG_PASSWORD,
        "DOCKER_GID": str(os.stat("/var/run/docker.sock").st_gid),
        "SAN_JOB_DISPATCHER": "none",
        "SAN_DAGSTER_BASE_URL": f"http://127.0.0.1:{web_port}",
    }

    def compose(*args, image=IMAGE, timeout=600):
        done = subprocess.run(
            ["docker-compose", "-p", project, "-f", str(compose_file), *args],
            env={**env, "BATCH_PIPELINE_IMAGE": image},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:  # compose says why (an unhealthy service, a port) on stderr
            subprocess.run(["docker", "ps", "-a", "--filter", f"name={project}"], check=False)
            pytest.fail(f"docker-compose {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
        return done

    # this process reads the same Dagster instance (deploy/dagster.prod.yaml: the same storage)
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "deploy" / "dagster.prod.yaml", home / "dagster.yaml")
    for name, value in {
        "DAGSTER_PG_HOST": "127.0.0.1",
        "DAGSTER_PG_PORT": str(pg_port),
        "DAGSTER_PG_USER": "dagster",
        "DAGSTER_PG_PASSWORD": PG_PASSWORD,
        "DAGSTER_PG_DB": "dagster",
    }.items():
        monkeypatch.setenv(name, value)
    lock = None
    try:
        compose("up", "-d")
        services = ("dagster-postgres", "code-server", "webserver", "daemon", "metrics")
        for service in services:
            container = container_of(project, service)
            wait_for(lambda c=container: health(c) == "healthy", 300, f"{service} to be healthy")

        # 1. a recovery run, launched through the webserver, in a container of its own
        ghost = pg_db.job(
            CARD_ANALYSIS, pg_db.scrap(pg_db.user()), PENDING, created_at=pg_db.ago(hours=1)
        )
        run_id, status = launch_through_webserver(web_port, "recovery_job", recovery_run_config({}))
        assert status == "SUCCESS"
        assert pg_db.get_job(ghost).status == FAILED
        with DagsterInstance.from_config(str(home)) as instance:
            tags = run_tags(instance, run_id)
            assert tags["dagster/image"] == IMAGE and tags["docker/container_id"]
            event = instance.get_latest_materialization_event(AssetKey("ghost_job_recovery"))
            assert event.run_id == run_id
            [healed] = event.asset_materialization.metadata["recovered"].value
            assert healed["failed_job_id"] == ghost and healed["new_job_id"]
        # the metrics service reads the same SAN database and instance
        scrape = f"http://127.0.0.1:{metrics_port}/metrics"
        wait_for(
            lambda: (
                'batch_pipeline_last_success_timestamp_seconds{dagster_job="recovery_job"}'
                in urllib.request.urlopen(scrape, timeout=5).read().decode()
            ),
            60,
            "the metrics service to see the run",
        )
        page = urllib.request.urlopen(scrape, timeout=5).read().decode()
        assert "batch_pipeline_san_up 1.0" in page and "batch_pipeline_dagster_up 1.0" in page

        # 2. Terminate in the webserver: the run's container stops, the run is CANCELED
        lock = held_lock(pg_db)
        long_run = submit_through_webserver(web_port, "recovery_job", LONG_RUN)
        wait_for_status(web_port, long_run, ("STARTED",), 180)
        with DagsterInstance.from_config(str(home)) as instance:
            run_container = wait_for(
                lambda: run_tags(instance, long_run).get("docker/container_id"), 60, "its container"
            )
        assert running(run_container)
        graphql_client(web_port).terminate_run(long_run)
        asked = time.monotonic()
        wait_for(lambda: not running(run_container), 30, "the run's container to stop", every_s=1)
        stopped_after = time.monotonic() - asked
        assert wait_for_status(web_port, long_run, ENDED, 60) == "CANCELED"
        print(f"Terminate: the run's container stopped {stopped_after:.1f} s after the request")
        lock.rollback()

        # 3. a run queued while the daemon is down starts once it is back
        compose("stop", "daemon")
        queued = submit_through_webserver(web_port, "recovery_job", recovery_run_config({}))
        time.sleep(10)
        assert graphql_client(web_port).get_run_status(queued).value == "QUEUED"
        compose("start", "daemon")
        assert wait_for_status(web_port, queued, ENDED, 300) == "SUCCESS"

        # 4. a new image tag of the code server: the run in flight finishes on the old image,
        # the next run uses the new one
        docker("build", "-t", ROLLOUT_IMAGE, "-", input_text=f"FROM {IMAGE}\nLABEL rollout=2\n")
        lock.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
        in_flight = submit_through_webserver(web_port, "recovery_job", LONG_RUN)
        wait_for_status(web_port, in_flight, ("STARTED",), 180)
        compose("up", "-d", "--no-deps", "code-server", image=ROLLOUT_IMAGE)
        code_server = container_of(project, "code-server")
        wait_for(lambda: health(code_server) == "healthy", 300, "the new code server")
        lock.rollback()
        assert wait_for_status(web_port, in_flight, ENDED, 300) == "SUCCESS"
        after, status = launch_through_webserver(web_port, "recovery_job", recovery_run_config({}))
        assert status == "SUCCESS"
        with DagsterInstance.from_config(str(home)) as instance:
            assert run_tags(instance, in_flight)["dagster/image"] == IMAGE
            assert run_tags(instance, after)["dagster/image"] == ROLLOUT_IMAGE
        assert (
            docker("inspect", "-f", "{{.Config.Image}}", code_server).stdout.strip()
            == ROLLOUT_IMAGE
        )

        # 5. a run whose container dies (SIGKILL) is failed by the daemon's run monitoring
        # (deploy/dagster.compose.yaml, poll_interval_seconds) and frees the one recovery_job
        # slot: the run queued behind it starts and succeeds
        lock.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
        doomed = submit_through_webserver(web_port, "recovery_job", LONG_RUN)
        wait_for_status(web_port, doomed, ("STARTED",), 180)
        with DagsterInstance.from_config(str(home)) as instance:
            doomed_container = wait_for(
                lambda: run_tags(instance, doomed).get("docker/container_id"), 60, "its container"
            )
        behind = submit_through_webserver(web_port, "recovery_job", recovery_run_config({}))
        docker("kill", "--signal", "KILL", doomed_container)
        killed = time.monotonic()
        lock.rollback()
        assert wait_for_status(web_port, doomed, ENDED, 240) == "FAILURE"
        failed_after = time.monotonic() - killed
        assert wait_for_status(web_port, behind, ENDED, 300) == "SUCCESS"
        print(
            f"SIGKILL: the run was FAILURE {failed_after:.0f} s after its container was killed; "
            f"the run queued behind it ended {time.monotonic() - killed:.0f} s after"
        )
    finally:
        if lock is not None:
            lock.close()
        for name in ("webserver", "daemon", "code-server"):  # what each saw, for a failure
            subprocess.run(
                ["docker-compose", "-p", project, "-f", str(compose_file), "logs", "--tail", "30",
                 name],
                env=env, timeout=60, check=False,
            )  # fmt: skip
        try:  # the runs' containers (not compose's), while the instance's storage is up
            with DagsterInstance.from_config(str(home)) as instance:
                remove_run_containers(instance)
        except Exception as unreachable:  # compose never brought the storage up: no runs
            print(f"no run containers to remove: {unreachable}")
        subprocess.run(
            ["docker-compose", "-p", project, "-f", str(compose_file), "down", "-v",
             "--remove-orphans"],
            env=env, capture_output=True, timeout=300, check=False,
        )  # fmt: skip
        docker("rmi", ROLLOUT_IMAGE, check=False)
