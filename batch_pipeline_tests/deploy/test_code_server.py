"""The code-server topology without containers: `dagster code-server start` serving the code
location over gRPC, and dagster-webserver and dagster-daemon loading it through
deploy/workspace.yaml (a grpc_server entry), on Dagster's PostgreSQL storage
(deploy/dagster.prod.yaml). A recovery_job run launched through the webserver's GraphQL API
succeeds in a run worker and its materializations are in the instance."""

import os
import shutil

import pytest
from dagster import AssetKey, DagsterInstance

from batch_pipeline.recovery.assets import recovery_run_config
from batch_pipeline.san.tables import CARD_ANALYSIS, FAILED, PENDING
from batch_pipeline_tests.processes import (
    BIN,
    ROOT,
    free_port,
    launch_through_webserver,
    serving,
    start,
)
from san_sandbox.processes import stop_group, wait_for

pytestmark = pytest.mark.system  # starts code servers, a webserver and a daemon


def test_a_run_launched_through_the_webserver_runs_from_the_code_server(
    tmp_path, pg_db, dagster_pg_storage
):
    ghost = pg_db.job(
        CARD_ANALYSIS, pg_db.scrap(pg_db.user()), PENDING, created_at=pg_db.ago(hours=1)
    )
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "deploy" / "dagster.prod.yaml", home / "dagster.yaml")
    grpc_port, web_port = free_port(), free_port()
    storage = dagster_pg_storage
    env = {
        **os.environ,
        **storage,
        "DAGSTER_HOME": str(home),
        "DAGSTER_CODE_SERVER_HOST": "127.0.0.1",
        "DAGSTER_CODE_SERVER_PORT": str(grpc_port),
    }
    # Only the code server reads the SAN settings: the webserver and the daemon never load the code.
    code_env = {**env, "SAN_DATABASE_URL": pg_db.url, "SAN_JOB_DISPATCHER": "none"}
    for name in ("SAN_DATABASE_URL", "SAN_JOB_DISPATCHER"):
        env.pop(name, None)
    DagsterInstance.from_config(
        str(home)
    ).dispose()  # the storage schema, before three processes race for it
    workspace = str(ROOT / "deploy" / "workspace.yaml")
    log = open(tmp_path / "dagster.log", "w")
    code_server = start(
        [
            str(BIN / "dagster"),
            "code-server",
            "start",
            "-m",
            "batch_pipeline.definitions",
            "--host",
            "127.0.0.1",
            "--port",
            str(grpc_port),
            "--location-name",
            "batch_pipeline",
        ],
        code_env,
        log,
    )
    webserver = start(
        [str(BIN / "dagster-webserver"), "-w", workspace, "-h", "127.0.0.1", "-p", str(web_port)],
        env,
        log,
    )
    daemon = start([str(BIN / "dagster-daemon"), "run", "-w", workspace], env, log)
    try:
        wait_for(lambda: serving(f"http://127.0.0.1:{web_port}"), 180, "the webserver to serve")
        run_id, status = launch_through_webserver(web_port, "recovery_job", recovery_run_config({}))
        assert status == "SUCCESS", (tmp_path / "dagster.log").read_text()[-3000:]
        assert pg_db.get_job(ghost).status == FAILED  # the run healed the SAN database
        with DagsterInstance.from_config(str(home)) as instance:
            event = instance.get_latest_materialization_event(AssetKey("ghost_job_recovery"))
            assert event is not None and event.run_id == run_id
            assert event.asset_materialization.metadata["enqueued"].value == 1
    finally:
        for process in (daemon, webserver, code_server):
            stop_group(process)
        log.close()
