"""`make run` (python -m san_sandbox ui): the Dagster UI comes up on a living SAN, a
recovery run launched through the webserver heals what the sandbox broke, and a stop (as a
terminal and systemd send it) stops all of it."""

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import NamedTuple

import pytest
from dagster import (
    AssetKey,
    DagsterEventType,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    RunsFilter,
)
from dagster._core.remote_origin import (
    RegisteredCodeLocationOrigin,
    RemoteJobOrigin,
    RemoteRepositoryOrigin,
)
from dagster_graphql import DagsterGraphQLClient
from sqlalchemy import func, select

from batch_pipeline.alerts.slack import base_url
from batch_pipeline.san.database import create_san_engine, utc_now
from batch_pipeline.san.tables import COMPLETED, PENDING, jobs, scraps
from batch_pipeline_tests.processes import (
    free_port,
    ignore_sigint,
    run_home,
    sandbox_env,
    sandbox_ui,
    serving,
)
from san_sandbox.processes import stop_group, wait_for
from san_sandbox.ui import (
    STOP_WITHIN_S,
    STOPPED_REASON,
    Supervised,
    cancel_runs_cut_short,
    demo_day,
    stop_at_once,
    wait_interruptibly,
    with_links_to,
)

pytestmark = pytest.mark.system  # runs `make run`: dagster dev and the living sandbox

ROOT = Path(__file__).resolve().parents[2]


def test_make_run_serves_the_ui_on_a_living_sandbox(tmp_path):
    home = run_home(tmp_path)
    env = sandbox_env(tmp_path / "data", DAGSTER_HOME=str(home))
    port = free_port()
    log = open(tmp_path / "ui.log", "w")
    process = subprocess.Popen(
        sandbox_ui(port),
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    engine = create_san_engine(f"sqlite:///{tmp_path / 'data' / 'san.sqlite'}")
    try:
        wait_for(lambda: serving(f"http://127.0.0.1:{port}"), 120, "the UI")

        def metrics() -> str:
            url = f"http://127.0.0.1:{env['METRICS_PORT']}/metrics"
            try:
                return urllib.request.urlopen(url, timeout=5).read().decode()
            except OSError:
                return ""

        # the metrics endpoint beside it, on the same database and instance
        page = wait_for(metrics, 60, "the metrics endpoint")
        assert "batch_pipeline_san_up 1.0" in page and "batch_pipeline_dagster_up 1.0" in page

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
            # and yesterday's TIL ran on its own, the demo's one partition, done
            yesterday = demo_day().isoformat()
            wait_for(
                lambda: instance.get_runs(
                    RunsFilter(
                        job_name="til_auto_generation_job",
                        tags={"dagster/partition": yesterday},
                        statuses=[DagsterRunStatus.SUCCESS],
                    )
                ),
                180,
                "the demo's TIL run",
            )
            assert "(yesterday in Asia/Seoul, SAN's time zone)" in (tmp_path / "ui.log").read_text()
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


def states_of(pids: list[int]) -> str:
    """Each process's state, what it waits in and its blocked, pending and caught signals: what
    a stop that did not arrive leaves behind to explain itself."""
    lines = []
    for pid in pids:
        try:
            status = dict(
                line.split(":\t", 1)
                for line in Path(f"/proc/{pid}/status").read_text().splitlines()
            )
            wchan = Path(f"/proc/{pid}/wchan").read_text()
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:100]
        except OSError:
            lines.append(f"{pid}: gone")
            continue
        signals = " ".join(f"{k}={status[k]}" for k in ("SigBlk", "SigPnd", "ShdPnd", "SigCgt"))
        lines.append(f"{pid} {status['State']} in {wchan or '-'} {signals}: {command.decode()}")
    return "\n".join(lines)


class Stop(NamedTuple):
    """How a stop arrives: `to` (make, or the command itself), `signal`, sent to its process
    group or to it alone, `presses` times a second apart, to a process started with SIGINT
    ignored or not."""

    to: str
    signal: signal.Signals
    to_the_group: bool = False
    presses: int = 1
    sigint_ignored: bool = False


# `kill`, `docker stop` and systemd (KillMode=mixed) send SIGTERM to the main process (here make,
# which passes it on to the recipe's `exec`ed command); a terminal's Ctrl-C sends SIGINT to the
# whole foreground process group; a script's `make run &` starts make with SIGINT ignored, and
# `kill -INT -- -PGID` later.
STOPS = {
    "kill, docker stop: SIGTERM to make": Stop("make", signal.SIGTERM),
    # an impatient user: the second must not break the stop half-way
    "terminal: Ctrl-C twice to make's process group": Stop(
        "make", signal.SIGINT, to_the_group=True, presses=2
    ),
    "script: SIGINT to the group of a background make": Stop(
        "make", signal.SIGINT, to_the_group=True, sigint_ignored=True
    ),
    "SIGTERM to the command itself": Stop("python", signal.SIGTERM),
}


# The stop's bound, and room for a loaded machine to notice every process has exited.
STOPPED_WITHIN_S = STOP_WITHIN_S + 5


@pytest.mark.parametrize("stop", list(STOPS.values()), ids=list(STOPS))
def test_a_stop_stops_everything_within_seconds_cancels_what_it_cut_short_restarts_nothing(
    tmp_path, stop, request
):
    how = request.node.callspec.id
    home = tmp_path / "dagster_home"
    env = sandbox_env(tmp_path / "data")
    env.pop("DAGSTER_HOME", None)
    port = free_port()
    if stop.to == "make":  # make makes the home
        command = ["make", "-s", "run", f"PORT={port}", f"RUN_HOME={home}"]
    else:
        env["DAGSTER_HOME"] = str(run_home(tmp_path))
        command = sandbox_ui(port)
    log = open(tmp_path / "ui.log", "w")
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=ignore_sigint if stop.sigint_ignored else None,
    )
    try:
        wait_for(lambda: serving(f"http://127.0.0.1:{port}"), 180, "the UI")
        assert len(processes_of(home)) >= 3  # this command, dagster dev, the webserver, ...
        said = (tmp_path / "ui.log").read_text()
        # neither false warning: ./dagster.yaml is the instance's config, and `dg dev` is not needed
        assert (
            "Found a dagster instance configuration" not in said
            and "Use 'dg dev' instead" not in said
        ), said[-2000:]
        # a run in flight when the stop comes (its worker takes seconds to start)
        client = DagsterGraphQLClient("127.0.0.1", port_number=port)
        run_id = wait_for(
            lambda: _submitted(client), 60, "the webserver to take a recovery run", every_s=1
        )
        wait_for(
            lambda: client.get_run_status(run_id).value in ("STARTING", "STARTED", "SUCCESS"),
            60,
            "the run to start",
            every_s=0.2,
        )
        before = states_of([process.pid, *processes_of(home)])
        asked = time.monotonic()
        for press in range(stop.presses):
            time.sleep(1 if press else 0)
            if stop.to_the_group:
                os.killpg(process.pid, stop.signal)
            else:
                process.send_signal(stop.signal)
        try:
            wait_for(
                lambda: not processes_of(home),
                STOPPED_WITHIN_S,
                "every process to exit",
                every_s=0.2,
            )
        except TimeoutError:
            pytest.fail(
                f"{how}: not stopped after {STOPPED_WITHIN_S:.0f} s\nbefore the signal:\n{before}"
                f"\nnow:\n{states_of([process.pid, *processes_of(home)])}\nits output:\n"
                + (tmp_path / "ui.log").read_text()[-3000:]
            )
        stopped_after = time.monotonic() - asked
        process.wait(15)
        if stop.to == "python":
            assert process.returncode == 0
        said = (tmp_path / "ui.log").read_text()
        print(f"{how}: everything stopped {stopped_after:.1f} s after the signal")
        assert "Traceback" not in said and "restarting it" not in said, said[-3000:]
        assert "stopped in" in said, said[-3000:]
        assert not serving(f"http://127.0.0.1:{port}")
        # the run the stop cut short is CANCELED with the reason, not a failure
        with DagsterInstance.from_config(str(home)) as instance:
            run = instance.get_run_by_id(run_id)
            assert run.status in (DagsterRunStatus.SUCCESS, DagsterRunStatus.CANCELED), run.status
            failed = instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.FAILURE]))
            assert failed == []
            if run.status == DagsterRunStatus.CANCELED:
                messages = [
                    record.event_log_entry.message
                    for record in instance.get_records_for_run(run_id).records
                ]
                assert STOPPED_REASON in messages
    finally:
        for pid in processes_of(home):
            os.kill(pid, signal.SIGKILL)
        log.close()


def _submitted(client):
    try:
        return client.submit_job_execution("recovery_job")
    except Exception:  # the code location is still loading
        return None


def test_runs_a_stop_cut_short_are_canceled_with_the_reason(tmp_path):
    with DagsterInstance.local_temp(str(tmp_path)) as instance:
        started = instance.add_run(
            DagsterRun(job_name="recovery_job", run_id="a" * 36, status=DagsterRunStatus.STARTED)
        )
        origin = RemoteJobOrigin(
            RemoteRepositoryOrigin(
                RegisteredCodeLocationOrigin("batch_pipeline"), "__repository__"
            ),
            "recovery_job",
        )
        queued = instance.add_run(
            DagsterRun(
                job_name="recovery_job",
                run_id="b" * 36,
                status=DagsterRunStatus.QUEUED,
                remote_job_origin=origin,
            )
        )
        home = instance.root_directory
        said = []
        assert cancel_runs_cut_short(home, report=said.append) == [started.run_id]
    with DagsterInstance.from_config(home) as instance:
        assert instance.get_run_by_id(started.run_id).status == DagsterRunStatus.CANCELED
        assert instance.get_run_by_id(queued.run_id).status == DagsterRunStatus.QUEUED  # it waits
        messages = [
            r.event_log_entry.message for r in instance.get_records_for_run("a" * 36).records
        ]
        assert STOPPED_REASON in messages
    assert said == [
        "stopped: 1 run(s) in flight marked CANCELED (recovery_job): the next runs redo their work"
    ]


def test_the_ui_restarts_a_living_sandbox_that_died_and_says_so():
    said = []
    child = Supervised(
        [sys.executable, "-c", "import sys; sys.exit(3)"],
        max_restarts=2,
        poll_s=0.1,
        report=said.append,
    )
    deadline = time.monotonic() + 30
    while len(said) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    child.stop()
    assert said[:2] == [
        "sandbox: the living sandbox died (exit 3); restarting it (1/2)",
        "sandbox: the living sandbox died (exit 3); restarting it (2/2)",
    ]
    assert said[2].startswith(
        "sandbox: the living sandbox died again (exit 3) after 2 restarts; it stays down"
    )


def test_a_stop_signal_another_thread_receives_still_ends_the_wait():
    """The kernel may hand SIGTERM to any thread; the main thread's wait must still end (a
    plain Popen.wait() blocks here until the child exits)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(20)"])

    def stop(_signum, _frame):
        raise KeyboardInterrupt

    def to_this_thread():
        time.sleep(0.5)
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)

    previous = signal.signal(signal.SIGTERM, stop)
    started = time.monotonic()
    try:
        threading.Thread(target=to_this_thread).start()
        with pytest.raises(KeyboardInterrupt):
            wait_interruptibly(child)
        assert time.monotonic() - started < 5
    finally:
        signal.signal(signal.SIGTERM, previous)
        child.kill()
        child.wait()


def test_the_sandbox_and_dagster_dev_are_stopped_at_the_same_time_not_one_after_the_other():
    """A stop takes as long as the slowest of its parts: each part here returns only once the
    other has started (one after the other, the first would wait for the second in vain)."""
    both_started = threading.Barrier(2, timeout=10)
    done = []

    def stop(name):
        def run():
            both_started.wait()
            done.append(name)

        return run

    stop_at_once(stop("sandbox"), stop("dagster dev"))
    assert sorted(done) == ["dagster dev", "sandbox"]


def test_the_links_of_make_run_on_another_port_point_at_that_port(tmp_path, monkeypatch):
    assert with_links_to({}, 3300)["SAN_DAGSTER_BASE_URL"] == "http://127.0.0.1:3300"
    mine = {"SAN_DAGSTER_BASE_URL": "https://dagster.san.example"}
    assert with_links_to(mine, 3300)["SAN_DAGSTER_BASE_URL"] == "https://dagster.san.example"
    # recorded in its instance, for an `explain` started from another shell
    with_links_to({"DAGSTER_HOME": str(tmp_path)}, 3300)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    monkeypatch.delenv("SAN_DAGSTER_BASE_URL", raising=False)
    assert base_url() == "http://127.0.0.1:3300"
