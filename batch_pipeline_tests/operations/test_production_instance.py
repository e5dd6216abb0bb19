"""deploy/dagster.prod.yaml for real: dagster-daemon and dagster-webserver on PostgreSQL storage
(the local server), and a scheduled tick that launches a recovery run which succeeds."""

import os
import shutil
import time

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from batch_pipeline.san.tables import CARD_ANALYSIS, FAILED, PENDING
from batch_pipeline.sandbox.processes import stop_group, wait_for
from batch_pipeline_tests.processes import BIN, ROOT, free_port, serving, start


def test_a_scheduled_tick_launches_a_recovery_run_on_the_production_instance(
    tmp_path, pg_db, dagster_pg_storage
):
    ghost = pg_db.job(CARD_ANALYSIS, 1, PENDING, created_at=pg_db.ago(hours=1))
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "deploy" / "dagster.prod.yaml", home / "dagster.yaml")
    env = {
        **os.environ,
        **dagster_pg_storage,
        "DAGSTER_HOME": str(home),
        "SAN_DATABASE_URL": pg_db.url,
        "SAN_JOB_DISPATCHER": "none",
        "SAN_RECOVERY_CRON": "* * * * *",  # a tick every minute instead of every 2 hours
    }
    # Create Dagster's storage schema once, before two processes race to create it on an empty
    # database (one of them failed here with 'type "run_tags" already exists').
    DagsterInstance.from_config(str(home)).dispose()
    port = free_port()
    log = open(tmp_path / "dagster.log", "w")
    daemon = start([str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"], env, log)
    webserver = start(
        [
            str(BIN / "dagster-webserver"),
            "-w",
            "workspace.yaml",
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
        ],
        env,
        log,
    )
    try:
        runs = []
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            time.sleep(5)
            with DagsterInstance.from_config(str(home)) as instance:
                runs = instance.get_runs(
                    RunsFilter(
                        job_name="recovery_job", tags={"dagster/schedule_name": "recovery_schedule"}
                    )
                )
                if any(run.status == DagsterRunStatus.SUCCESS for run in runs):
                    break
        assert any(run.status == DagsterRunStatus.SUCCESS for run in runs), (
            tmp_path / "dagster.log"
        ).read_text()[-3000:]
        # the scheduled run really healed the SAN database
        assert job_status(pg_db, ghost) == FAILED
        # the webserver on the same instance answers too (on a loaded machine it may still be
        # loading the code location when the daemon's run is already done: give it time)
        assert webserver.poll() is None, (tmp_path / "dagster.log").read_text()[-3000:]
        wait_for(lambda: serving(f"http://127.0.0.1:{port}"), 120, "the webserver to serve")
    finally:
        stop_group(webserver)
        stop_group(daemon)
        log.close()


def job_status(db, job_id):
    return db.get_job(job_id).status
