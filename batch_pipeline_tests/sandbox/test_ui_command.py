"""`make run` (python -m batch_pipeline.sandbox ui): the Dagster UI comes up on a living SAN,
and a recovery run launched through the webserver heals what the sandbox broke."""

import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter
from dagster_graphql import DagsterGraphQLClient
from sqlalchemy import func, select

from batch_pipeline.san.database import create_san_engine, utc_now
from batch_pipeline.san.tables import COMPLETED, PENDING, jobs, scraps
from batch_pipeline.sandbox.processes import stop_group, wait_for
from batch_pipeline_tests.processes import free_port, serving

ROOT = Path(__file__).resolve().parents[2]


def test_make_run_serves_the_ui_on_a_living_sandbox(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home), "SAN_DATA_DIR": str(tmp_path / "data")}
    for name in ("SAN_DATABASE_URL", "SAN_JOB_DISPATCHER", "SAN_RECOVERY_CRON"):
        env.pop(name, None)
    port = free_port()
    log = open(tmp_path / "ui.log", "w")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "batch_pipeline.sandbox",
            "ui",
            "--",
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    engine = create_san_engine(f"sqlite:///{tmp_path / 'data' / 'san.sqlite'}")
    try:
        wait_for(lambda: serving(f"http://127.0.0.1:{port}"), 120, "the UI")

        def count(*where):
            with engine.connect() as conn:
                return conn.execute(
                    select(func.count()).select_from(jobs).where(*where)
                ).scalar_one()

        def scrap_count():
            with engine.connect() as conn:
                return conn.execute(select(func.count()).select_from(scraps)).scalar_one()

        # alive: scraps keep arriving and the worker completes jobs (the seed has 30 scraps)
        wait_for(
            lambda: scrap_count() > 40 and count(jobs.c.status == COMPLETED, jobs.c.id > 50) > 5,
            90,
            "the sandbox to work",
        )

        # the fast clock turns lost events into ghosts (PENDING for over 30 SAN minutes)
        def ghosts():
            with engine.connect() as conn:
                return (
                    conn.execute(
                        select(jobs.c.id).where(
                            jobs.c.status == PENDING,
                            jobs.c.id > 50,
                            jobs.c.created_at < utc_now() - timedelta(minutes=40),
                        )
                    )
                    .scalars()
                    .all()
                )

        wait_for(lambda: ghosts(), 120, "a ghost made by the sandbox")
        seen = ghosts()

        client = DagsterGraphQLClient("127.0.0.1", port_number=port)
        run_id = client.submit_job_execution("recovery_job")
        wait_for(
            lambda: client.get_run_status(run_id).value in ("SUCCESS", "FAILURE"),
            180,
            "the recovery run",
        )
        assert client.get_run_status(run_id).value == "SUCCESS"
        with DagsterInstance.from_config(str(home)) as instance:
            # this run recorded what it healed
            assert [
                r
                for r in instance.fetch_materializations(
                    AssetKey("ghost_job_recovery"), limit=100
                ).records
                if r.run_id == run_id
            ]
            # the ghosts seen before it are healed (by this run, or the every-minute schedule's)
            with engine.connect() as conn:
                assert not conn.execute(
                    select(jobs.c.id).where(jobs.c.id.in_(seen), jobs.c.status == PENDING)
                ).all()
            # the demo and the check agree: no ghost is left stale for twice its threshold after a
            # heal
            records = instance.get_records_for_run(
                run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION
            ).records
            evaluations = [r.event_log_entry.dagster_event.event_specific_data for r in records]
            checks = {evaluation.check_name: evaluation for evaluation in evaluations}
            assert checks["ghost_backlog"].passed, checks["ghost_backlog"].description
            # and recovery_schedule keeps up with the sandbox's clock on its own (every minute)
            wait_for(
                lambda: instance.get_runs(
                    RunsFilter(
                        job_name="recovery_job", tags={"dagster/schedule_name": "recovery_schedule"}
                    )
                ),
                150,
                "a scheduled recovery run",
            )
            # and the fast lane heals the demo's failed AI calls and app deaths between those runs
            wait_for(
                lambda: instance.get_runs(
                    RunsFilter(job_name="fast_heal_job", statuses=[DagsterRunStatus.SUCCESS])
                ),
                150,
                "a fast_heal_job run requested by fast_heal_sensor",
            )
    finally:
        stop_group(process, signal.SIGINT)  # Ctrl-C, as a user stops `make run`
        log.close()
        engine.dispose()
    # Ctrl-C stopped the sandbox too: no more scraps arrive
    time.sleep(3)
    with create_san_engine(f"sqlite:///{tmp_path / 'data' / 'san.sqlite'}").connect() as conn:
        first = conn.execute(select(func.count()).select_from(scraps)).scalar_one()
    time.sleep(3)
    with create_san_engine(f"sqlite:///{tmp_path / 'data' / 'san.sqlite'}").connect() as conn:
        assert conn.execute(select(func.count()).select_from(scraps)).scalar_one() == first


def processes_of(home: Path) -> list[int]:
    """Every live process started with this DAGSTER_HOME (dagster dev and all it started)."""
    marker = f"DAGSTER_HOME={home}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (
                    marker in (entry / "environ").read_bytes().split(b"\0")
                    and (entry / "stat").read_text().split()[2] != "Z"
                ):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_to_make_run_stops_dagster_dev_and_everything_it_started(
    tmp_path, stop_signal
):
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").symlink_to(ROOT / "dagster.yaml")  # as `make run` links it
    env = {**os.environ, "DAGSTER_HOME": str(home), "SAN_DATA_DIR": str(tmp_path / "data")}
    env.pop("SAN_DATABASE_URL", None)
    port = free_port()
    log = open(tmp_path / "ui.log", "w")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "batch_pipeline.sandbox",
            "ui",
            "--still",
            "--",
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for(lambda: serving(f"http://127.0.0.1:{port}"), 120, "the UI")
        # this command, dagster dev, the webserver, the daemon...
        assert len(processes_of(home)) >= 3
        said = (tmp_path / "ui.log").read_text()
        # neither false warning: ./dagster.yaml is the instance's config, and `dg dev` is not needed
        assert (
            "Found a dagster instance configuration" not in said
            and "Use 'dg dev' instead" not in said
        ), said[-2000:]
        process.send_signal(stop_signal)  # to this process only, as systemd and Docker do
        process.wait(60)
        wait_for(
            lambda: not processes_of(home),
            30,
            f"every process to exit after {stop_signal.name}",
            every_s=1,
        )
        assert not serving(f"http://127.0.0.1:{port}")
    finally:
        for pid in processes_of(home):
            os.kill(pid, signal.SIGKILL)
        log.close()
