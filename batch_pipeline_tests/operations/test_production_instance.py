"""deploy/dagster.prod.yaml for real: dagster-daemon and dagster-webserver on PostgreSQL storage
(the local server): a scheduled tick launches a recovery run which succeeds, a run whose
process is SIGKILLed mid-write frees the queue at once and is audited by the next run, and a run
stopped by the UI's Terminate or a SIGTERM commits no batch after the one in flight."""

import os
import signal
import time

import pytest
from dagster import AssetKey, DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter
from sqlalchemy import text

from batch_pipeline.recovery.assets import recovery_run_config
from batch_pipeline.recovery.dead_runs import AUDIT_OF_RUN
from batch_pipeline.san.tables import CARD_ANALYSIS, FAILED, PENDING
from batch_pipeline_tests.processes import (
    graphql_client,
    production_deployment,
    serving,
    submit_through_webserver,
    wait_for_status,
)
from san_sandbox.processes import wait_for

pytestmark = pytest.mark.system  # runs the daemon and the webserver


def test_a_scheduled_tick_launches_a_recovery_run_on_the_production_instance(
    tmp_path, pg_db, dagster_pg_storage
):
    ghost = pg_db.job(CARD_ANALYSIS, 1, PENDING, created_at=pg_db.ago(hours=1))
    with production_deployment(
        tmp_path,
        pg_db,
        dagster_pg_storage,
        SAN_RECOVERY_CRON="* * * * *",  # a tick every minute instead of every 2 hours
    ) as (home, port, log, _, _):
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
        assert any(run.status == DagsterRunStatus.SUCCESS for run in runs), log.read_text()[-3000:]
        # the scheduled run really healed the SAN database
        assert pg_db.get_job(ghost).status == FAILED
        # the webserver on the same instance answers too (on a loaded machine it may still be
        # loading the code location when the daemon's run is already done: give it time)
        wait_for(lambda: serving(f"http://127.0.0.1:{port}"), 120, "the webserver to serve")


GHOST_TARGETS = range(5_000, 5_120)


def slow_closes(pg_db, seconds_per_row: float) -> None:
    """Every UPDATE of a job in the test's schema takes `seconds_per_row` (a trigger): a run's
    write batches take long enough to kill the run between two of them."""
    with pg_db.engine.begin() as conn:
        conn.execute(
            text(
                "CREATE FUNCTION slow_update() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                f"PERFORM pg_sleep({seconds_per_row}); RETURN NEW; END $$"
            )
        )
        conn.execute(
            text(
                "CREATE TRIGGER slow_update BEFORE UPDATE ON jobs FOR EACH ROW "
                "EXECUTE FUNCTION slow_update()"
            )
        )


def run_worker_pid(instance: DagsterInstance, run_id: str) -> int | None:
    """The run's own process: the one its RUN_START event came from."""
    for entry in instance.all_logs(run_id, of_type=DagsterEventType.RUN_START):
        return entry.dagster_event.pid
    return None


def slow_ghosts(pg_db):
    """120 ghosts whose closing takes 0.05 s each (a batch of 5: 0.25 s; a run: 6 s or more);
    returns what lists the closed ones."""
    ghosts = [
        pg_db.job(CARD_ANALYSIS, target, PENDING, created_at=pg_db.ago(hours=1))
        for target in GHOST_TARGETS
    ]
    slow_closes(pg_db, seconds_per_row=0.05)

    def closed() -> list[int]:
        return [ghost for ghost in ghosts if pg_db.get_job(ghost).status == FAILED]

    return closed


def writing_run(port: int, home, log, closed) -> tuple[str, int]:
    """A recovery run submitted through the webserver, once it committed three write batches:
    its id and its process's pid."""
    run_id = submit_through_webserver(port, "recovery_job", recovery_run_config({"batch_size": 5}))
    wait_for(lambda: len(closed()) >= 15, 240, "the run to commit three write batches", 0.2)
    with DagsterInstance.from_config(str(home)) as instance:
        pid = run_worker_pid(instance, run_id)
    assert pid is not None, log.read_text()[-3000:]
    return run_id, pid


def ghost_audits(home) -> list[tuple[str, dict]]:
    """(run id, metadata) of the latest materializations of ghost_job_recovery."""
    with DagsterInstance.from_config(str(home)) as instance:
        records = instance.fetch_materializations(AssetKey("ghost_job_recovery"), limit=10).records
    return [
        (r.run_id, {k: v.value for k, v in r.asset_materialization.metadata.items()})
        for r in records
    ]


def recorded_by(audits, later: str, dead: str, closed_by_dead: list[int]) -> dict:
    """The one audit of `dead`'s writes, recorded by `later`, listing exactly `closed_by_dead`."""
    [(recorder, recorded)] = [(run, meta) for run, meta in audits if AUDIT_OF_RUN in meta]
    assert recorder == later and recorded[AUDIT_OF_RUN] == dead
    assert sorted(r["failed_job_id"] for r in recorded["recovered"]) == closed_by_dead
    return recorded


def test_a_killed_run_frees_the_queue_and_the_next_run_records_what_it_wrote(
    tmp_path, pg_db, dagster_pg_storage
):
    closed = slow_ghosts(pg_db)
    with production_deployment(tmp_path, pg_db, dagster_pg_storage) as (home, port, log, _, _):
        dead, pid = writing_run(port, home, log, closed)
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        wait_for_status(port, dead, ("FAILURE",), 180)
        freed_after_s = time.monotonic() - killed_at
        closed_by_dead = closed()
        assert 15 <= len(closed_by_dead) < len(GHOST_TARGETS)
        with pg_db.engine.begin() as conn:
            conn.execute(text("DROP TRIGGER slow_update ON jobs"))

        later = submit_through_webserver(port, "recovery_job", recovery_run_config())
        assert wait_for_status(port, later, ("SUCCESS", "FAILURE"), 240) == "SUCCESS", (
            log.read_text()[-3000:]
        )
        audits = ghost_audits(home)
    recorded = recorded_by(audits, later, dead, closed_by_dead)
    assert recorded["enqueued"] == len(closed_by_dead)
    [own] = [meta for run, meta in audits if run == later and AUDIT_OF_RUN not in meta]
    assert (own["enqueued"], own["skipped_by_race"]) == (
        len(GHOST_TARGETS) - len(closed_by_dead),
        0,
    )
    # The code server saw its run's process die and failed the run (wait_for_status above: within
    # 3 minutes, not the run's 1 h max_runtime): the queue, one recovery_job at a time, was free.
    print(f"the killed run was FAILURE {freed_after_s:.1f} s after its SIGKILL")


def parent_pid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])


def test_a_run_killed_with_its_code_server_is_ended_and_audited_by_the_next_run(
    tmp_path, pg_db, dagster_pg_storage
):
    """The run's process and the code server that launched it die together (the code server is
    what would report the run FAILURE; a storage outage at that moment stops it the same way):
    run_worker_watchdog, in the code server the daemon starts again, ends the run, so the queued
    recovery_job run starts and audits what the dead one wrote. Without it the run stayed
    STARTED until its max_runtime (1 h) and the next run waited behind it."""
    closed = slow_ghosts(pg_db)
    with production_deployment(tmp_path, pg_db, dagster_pg_storage) as (home, port, log, _, _):
        dead, pid = writing_run(port, home, log, closed)
        code_server = parent_pid(pid)
        os.kill(code_server, signal.SIGKILL)
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        later = submit_through_webserver(port, "recovery_job", recovery_run_config())
        assert wait_for_status(port, dead, ("FAILURE",), 300) == "FAILURE", log.read_text()[-3000:]
        ended_after_s = time.monotonic() - killed_at
        closed_by_dead = closed()
        with pg_db.engine.begin() as conn:
            conn.execute(text("DROP TRIGGER slow_update ON jobs"))
        assert wait_for_status(port, later, ("SUCCESS", "FAILURE"), 300) == "SUCCESS", (
            log.read_text()[-3000:]
        )
        recorded_by(ghost_audits(home), later, dead, closed_by_dead)
        with DagsterInstance.from_config(str(home)) as instance:
            said = [entry.message for entry in instance.all_logs(dead)]
    assert any("run_worker_watchdog" in line for line in said)
    print(f"the run killed with its code server was FAILURE {ended_after_s:.1f} s later")


def stopped_run_writes_no_further_batch(tmp_path, pg_db, dagster_pg_storage, stop) -> tuple:
    """A slow recovery run in flight under the daemon, stopped by `stop(port, home, run_id)` once
    it has committed a few batches. Returns (run's final status, seconds to reach it, ghosts
    closed when it was stopped, ghosts closed 10 s after it ended, batch size)."""
    batch_size = 5
    ghosts = [
        pg_db.job(CARD_ANALYSIS, target, PENDING, created_at=pg_db.ago(hours=1))
        for target in GHOST_TARGETS
    ]
    slow_closes(pg_db, seconds_per_row=0.05)  # a batch of 5: 0.25 s, then a rest of 0.25 s

    def closed() -> int:
        with pg_db.engine.connect() as conn:
            return conn.execute(
                text("SELECT count(*) FROM jobs WHERE status = :failed AND id = ANY(:ids)"),
                {"failed": FAILED, "ids": ghosts},
            ).scalar_one()

    with production_deployment(tmp_path, pg_db, dagster_pg_storage) as (home, port, log, _, _):
        run_id = submit_through_webserver(
            port,
            "recovery_job",
            recovery_run_config({"batch_size": batch_size, "batch_pause_ratio": 1}),
        )
        wait_for(lambda: closed() >= 3 * batch_size, 240, "three committed write batches", 0.1)
        at_stop = closed()
        stop(port, home, run_id)
        stopped = time.monotonic()
        status = wait_for_status(port, run_id, ("CANCELED", "FAILURE", "SUCCESS"), 120)
        ended_after_s = time.monotonic() - stopped
        time.sleep(10)  # a retry of the step would be writing again by now (its delay is 3 s)
        later = closed()
    return status, ended_after_s, at_stop, later, batch_size, len(ghosts)


def terminate_in_the_ui(port, _home, run_id):
    """The UI's Terminate: the webserver's terminateRun, through the daemon's run launcher."""
    graphql_client(port).terminate_run(run_id)


def sigterm_to_the_run_worker(_port, home, run_id):
    """What Docker and Kubernetes send first."""
    with DagsterInstance.from_config(str(home)) as instance:
        pid = run_worker_pid(instance, run_id)
    assert pid is not None
    os.kill(pid, signal.SIGTERM)


@pytest.mark.parametrize(
    "stop, ended_as",
    # SIGTERM: no operator asked for it, Dagster calls it a failure
    [(terminate_in_the_ui, "CANCELED"), (sigterm_to_the_run_worker, "FAILURE")],
)
def test_a_stopped_recovery_run_commits_no_batch_after_the_one_in_flight(
    tmp_path, pg_db, dagster_pg_storage, stop, ended_as
):
    """No write batch but the one in flight commits, and the run ends within 30 s, not retried
    (every recovery op asks for retries on errors only, never with a retry policy)."""
    status, ended_after_s, at_stop, later, batch_size, total = stopped_run_writes_no_further_batch(
        tmp_path, pg_db, dagster_pg_storage, stop
    )
    assert status == ended_as
    assert ended_after_s < 30
    assert at_stop <= later <= at_stop + batch_size < total
    print(f"{status} {ended_after_s:.1f} s after {stop.__name__}; {later - at_stop} closed after")
