"""deploy/Dockerfile for real: the image is built (from a wheelhouse, on a base image made from
Debian's packages where no registry is reachable), its code server runs in a container, the
webserver and the daemon (host processes, deploy/dagster.compose.yaml: Docker run launcher)
launch recovery_job through the webserver's GraphQL API, and the run succeeds in a container of
its own and records its materializations. Skipped only where Docker is truly absent."""

import os
import shutil
import socket
import uuid

import pytest
from dagster import AssetKey, DagsterInstance

from batch_pipeline.recovery.assets import recovery_run_config
from batch_pipeline.san.tables import CARD_ANALYSIS, FAILED, PENDING
from batch_pipeline_tests.deploy.docker import (
    IMAGE,
    built_image,
    docker,
    launcher_env_vars,
    remove_run_containers,
)
from batch_pipeline_tests.processes import (
    BIN,
    ROOT,
    code_server_serves,
    free_port,
    launch_through_webserver,
    serving,
    start,
)
from san_sandbox.processes import stop_group, wait_for

pytestmark = pytest.mark.system  # builds and runs the image in Docker


def reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def outside_address() -> str | None:
    """An address of this host other than loopback, if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: only the route is looked up
            address = probe.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


# A first build on a new machine makes the base image (debootstrap) and the wheelhouse.
@pytest.mark.timeout(2400)
def test_the_image_serves_the_code_location_and_each_run_gets_its_own_container(
    tmp_path, pg_db, dagster_pg_storage, monkeypatch
):
    built_image(tmp_path)
    ghost = pg_db.job(
        CARD_ANALYSIS, pg_db.scrap(pg_db.user()), PENDING, created_at=pg_db.ago(hours=1)
    )
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "deploy" / "dagster.compose.yaml", home / "dagster.yaml")
    grpc_port, web_port = free_port(), free_port()
    # every variable the run launcher passes on must be set: docker-compose.yml sets each one
    # (`${NAME:-}`, empty: the default), so does this test
    passed_on = launcher_env_vars()
    settings = {name: "" for name in passed_on}
    settings.update(
        {  # no bridge network on this machine: every container shares the host's
            **dagster_pg_storage,
            "DAGSTER_CODE_SERVER_HOST": "127.0.0.1",
            "DAGSTER_CODE_SERVER_PORT": str(grpc_port),
            "BATCH_PIPELINE_IMAGE": IMAGE,
            "DAGSTER_RUN_NETWORK": "host",
            "SAN_DATABASE_URL": pg_db.url,
            "SAN_JOB_DISPATCHER": "none",
            "SAN_REDIS_URL": "redis://127.0.0.1:6379/0",
            "SAN_DAGSTER_BASE_URL": f"http://127.0.0.1:{web_port}",
        }
    )
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    DagsterInstance.from_config(str(home)).dispose()  # the storage schema, once
    container = f"bp-code-server-{uuid.uuid4().hex[:8]}"
    env_flags = [flag for name, value in settings.items() for flag in ("-e", f"{name}={value}")]
    docker(
        "run",
        "-d",
        "--name",
        container,
        "--network",
        "host",
        "-e",
        f"PORT={grpc_port}",
        "-e",
        "HOST=127.0.0.1",
        *env_flags,
        IMAGE,
    )
    env = {**os.environ, **settings, "DAGSTER_HOME": str(home)}
    workspace = str(ROOT / "deploy" / "workspace.yaml")
    log = open(tmp_path / "dagster.log", "w")
    webserver = start(
        [str(BIN / "dagster-webserver"), "-w", workspace, "-h", "127.0.0.1", "-p", str(web_port)],
        env,
        log,
    )
    daemon = start([str(BIN / "dagster-daemon"), "run", "-w", workspace], env, log)
    try:
        # the image has no HEALTHCHECK of its own: ask the code server, as compose's check does
        wait_for(
            lambda: code_server_serves(grpc_port),
            180,
            "the code server container to serve",
            every_s=3,
        )
        address = outside_address()
        if address:  # listening on loopback only: not reachable from this host's other address
            assert reachable("127.0.0.1", grpc_port) and not reachable(address, grpc_port)
        wait_for(lambda: serving(f"http://127.0.0.1:{web_port}"), 180, "the webserver to serve")
        run_id, status = launch_through_webserver(web_port, "recovery_job", recovery_run_config({}))
        assert status == "SUCCESS", (tmp_path / "dagster.log").read_text()[-3000:]
        assert pg_db.get_job(ghost).status == FAILED
        with DagsterInstance.from_config(str(home)) as instance:
            run = instance.get_run_by_id(run_id)
            run_container = run.tags.get("docker/container_id")
            assert run_container, run.tags  # the Docker run launcher started it
            assert (
                docker("inspect", "-f", "{{.Config.Image}}", run_container).stdout.strip() == IMAGE
            )
            event = instance.get_latest_materialization_event(AssetKey("ghost_job_recovery"))
            assert event is not None and event.run_id == run_id
    finally:
        stop_group(webserver)
        stop_group(daemon)
        log.close()
        docker("rm", "-f", container, check=False)
        with DagsterInstance.from_config(str(home)) as instance:
            remove_run_containers(instance)
