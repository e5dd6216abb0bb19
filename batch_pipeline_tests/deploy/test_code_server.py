"""The code-server topology without containers: `dagster code-server start` serving the code
location over gRPC, and dagster-webserver and dagster-daemon loading it through
deploy/workspace.yaml (a grpc_server entry), on Dagster's PostgreSQL storage
(deploy/dagster.prod.yaml). A recovery_job run launched through the webserver's GraphQL API
succeeds in a run worker and its materializations are in the instance."""

import os
import shutil
import time
import uuid

from dagster import AssetKey, DagsterInstance
from dagster_graphql import DagsterGraphQLClient
from sqlalchemy import text
from sqlalchemy.engine import make_url

from batch_pipeline.recovery.assets import recovery_run_config
from batch_pipeline.san.database import create_san_engine
from batch_pipeline.san.schema import CARD_ANALYSIS, FAILED, PENDING
from batch_pipeline_tests.conftest import pg_admin_url
from batch_pipeline_tests.operations.test_production_instance import BIN, ROOT, start, stop
from batch_pipeline_tests.processes import free_port, serving, wait_for


def test_a_run_launched_through_the_webserver_runs_from_the_code_server(tmp_path, pg_db, monkeypatch):
    ghost = pg_db.job(CARD_ANALYSIS, pg_db.scrap(pg_db.user()), PENDING, created_at=pg_db.ago(hours=1))
    admin = create_san_engine(pg_admin_url()).execution_options(isolation_level="AUTOCOMMIT")
    storage_db = f"bp_dagster_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {storage_db}"))
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "deploy" / "dagster.prod.yaml", home / "dagster.yaml")
    server = make_url(pg_admin_url())
    grpc_port, web_port = free_port(), free_port()
    storage = {
        "DAGSTER_PG_HOST": server.host or "127.0.0.1", "DAGSTER_PG_PORT": str(server.port or 5432),
        "DAGSTER_PG_USER": server.username or "postgres", "DAGSTER_PG_PASSWORD": server.password or "unused",
        "DAGSTER_PG_DB": storage_db,
    }
    env = {**os.environ, **storage, "DAGSTER_HOME": str(home),
           "DAGSTER_CODE_SERVER_HOST": "127.0.0.1", "DAGSTER_CODE_SERVER_PORT": str(grpc_port)}
    # Only the code server reads the SAN settings: the webserver and the daemon never load the code.
    code_env = {**env, "SAN_DATABASE_URL": pg_db.url, "SAN_JOB_DISPATCHER": "none"}
    for name in ("SAN_DATABASE_URL", "SAN_JOB_DISPATCHER"):
        env.pop(name, None)
    for name, value in storage.items():
        monkeypatch.setenv(name, value)
    DagsterInstance.from_config(str(home)).dispose()  # the storage schema, before three processes race for it
    workspace = str(ROOT / "deploy" / "workspace.yaml")
    log = open(tmp_path / "dagster.log", "w")
    code_server = start([str(BIN / "dagster"), "code-server", "start", "-m", "batch_pipeline.definitions",
                         "--host", "127.0.0.1", "--port", str(grpc_port), "--location-name", "batch_pipeline"],
                        code_env, log)
    webserver = start([str(BIN / "dagster-webserver"), "-w", workspace, "-h", "127.0.0.1", "-p", str(web_port)], env, log)
    daemon = start([str(BIN / "dagster-daemon"), "run", "-w", workspace], env, log)
    try:
        wait_for(lambda: serving(f"http://127.0.0.1:{web_port}"), 180, "the webserver to serve")
        client = DagsterGraphQLClient("127.0.0.1", port_number=web_port)

        def submitted():
            try:
                return client.submit_job_execution("recovery_job", repository_location_name="batch_pipeline",
                                                   run_config=recovery_run_config({}))
            except Exception:  # the code location may still be loading from the code server
                return None

        run_id = wait_for(submitted, 120, "the webserver to launch recovery_job from the code server")
        deadline, status = time.monotonic() + 240, None
        while time.monotonic() < deadline:
            status = client.get_run_status(run_id).value
            if status in ("SUCCESS", "FAILURE", "CANCELED"):
                break
            time.sleep(2)
        assert status == "SUCCESS", (tmp_path / "dagster.log").read_text()[-3000:]
        assert pg_db.get_job(ghost).status == FAILED  # the run healed the SAN database
        with DagsterInstance.from_config(str(home)) as instance:
            event = instance.get_latest_materialization_event(AssetKey("ghost_job_recovery"))
            assert event is not None and event.run_id == run_id
            assert event.asset_materialization.metadata["enqueued"].value == 1
    finally:
        for process in (daemon, webserver, code_server):
            stop(process)
        log.close()
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {storage_db} WITH (FORCE)"))
        admin.dispose()
