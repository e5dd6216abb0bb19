"""`make run` (`python -m san_sandbox ui`): `dagster dev` on the embedded default,
with the living sandbox beside it, and a stop that stops all of it.

A stop is Ctrl-C in a terminal (SIGINT to the foreground process group) or SIGTERM to this
process (`kill`, `docker stop`, systemd with KillMode=mixed; make passes it on to the recipe's
command, which is `exec`ed). Either way, within STOP_WITHIN_S: the living sandbox and
`dagster dev` are told at once (each group killed if it is not done within its grace), then
every run the stop cut short is marked CANCELED with the reason, so the next start shows no
failure nobody explains. This process exits 0; nothing is restarted.
"""

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from batch_pipeline.alerts.slack import UI_ADDRESS_FILE
from batch_pipeline.monitoring.exporter import DEFAULT_PORT as DEFAULT_METRICS_PORT
from batch_pipeline.san.database import create_san_engine, default_data_dir, embedded_database_url
from batch_pipeline.san.timezone import san_timezone_name
from batch_pipeline.til.auto_generation import day_bounds, detect_users_of_day
from batch_pipeline.til.partitions import PARTITION_SET_TAG, PARTITION_TAG, partition_set_name
from san_sandbox.app_schema import NotASandbox
from san_sandbox.demo import seed_demo_state
from san_sandbox.live import LIVE_RECOVERY_CRON
from san_sandbox.processes import start_group, stop_group

# A stop takes at most this long: `dagster dev` has DAGSTER_DEV_GRACE_S of it to shut down its
# webserver, daemon and code servers itself (the sandbox, stopped at the same time, less), then
# SIGKILL, then the runs it cut short are marked CANCELED.
STOP_WITHIN_S = 10.0
DAGSTER_DEV_GRACE_S = 6.0
SANDBOX_GRACE_S = 2.0
TIL_JOB = "til_auto_generation_job"
DEMO_TIL_POLL_S = 10.0
CUT_SHORT = (
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
    DagsterRunStatus.CANCELING,
)
STOPPED_REASON = (
    "make run was stopped while this run was in flight, so it did not finish; nothing it had "
    "not committed was written, and the next run redoes its work"
)


def say(line: str) -> None:
    """One line on stdout at once (to a file or a pipe it is block-buffered otherwise, and a
    killed process would lose it)."""
    print(line, flush=True)


def wait_interruptibly(process: subprocess.Popen, poll_s: float = 0.5) -> int:
    """process.wait(), but in short waits: the kernel may hand SIGTERM to another thread of this
    process (the demo's TIL launcher, the sandbox's watcher), and a blocking wait in the main
    thread would then never return to run the handler."""
    while True:
        try:
            return process.wait(timeout=poll_s)
        except subprocess.TimeoutExpired:
            continue


class Supervised:
    """A child process kept alive beside the UI: if it dies, say so and start it again (at most
    `max_restarts` times, then say that it stays down), so the UI never serves a dead sandbox
    in silence. It runs in a process group of its own: a terminal's Ctrl-C reaches this
    process, which stops it (it is not restarted then)."""

    def __init__(self, command: list[str], max_restarts: int = 3, poll_s: float = 1.0, report=say):
        self.command, self.max_restarts, self.poll_s, self.report = (
            command,
            max_restarts,
            poll_s,
            report,
        )
        self.restarts = 0
        self._stop = threading.Event()
        self.process = start_group(command)
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            code = self.process.poll()
            if code is None or self._stop.is_set():
                continue
            if self.restarts >= self.max_restarts:
                self.report(
                    f"sandbox: the living sandbox died again (exit {code}) after {self.restarts} "
                    "restarts; "
                    "it stays down (its error is above). The UI still works on the database."
                )
                return
            self.restarts += 1
            self.report(
                f"sandbox: the living sandbox died (exit {code}); restarting it "
                f"({self.restarts}/{self.max_restarts})"
            )
            self.process = start_group(self.command)

    def stop(self, grace_s: float = SANDBOX_GRACE_S) -> None:
        self._stop.set()
        self._watcher.join()
        if self.process.poll() is None:
            stop_group(self.process, signal.SIGINT, grace_s)


def dagster_dev(command: list[str]) -> tuple[list[str], str | None, dict]:
    """The `dagster dev` command, where it runs and its environment, without two false warnings.

    `make run` links $DAGSTER_HOME/dagster.yaml to ./dagster.yaml; `dagster dev` started here
    would warn that ./dagster.yaml "will not be used" (it is: it is the same file), so it starts
    in DAGSTER_HOME, with the workspace and the embedded default's folder given as absolute
    paths. Its "Use 'dg dev' instead" is silenced too: `dg dev` runs the same `dagster dev`
    (and works here, [tool.dg]), but this command supervises the sandbox beside it."""
    env = {**os.environ}
    env["PYTHONWARNINGS"] = ",".join(
        filter(None, [env.get("PYTHONWARNINGS"), "ignore:Function `dev_command` is superseded"])
    )
    home, here = os.environ.get("DAGSTER_HOME"), Path.cwd()
    if (
        not home
        or not (here / "dagster.yaml").exists()
        or not (Path(home) / "dagster.yaml").exists()
    ):
        return command, None, env
    if not os.path.samefile(here / "dagster.yaml", Path(home) / "dagster.yaml"):
        return command, None, env  # a different instance config: the warning is true, let it speak
    if "-w" not in command and "--workspace" not in command and (here / "workspace.yaml").exists():
        command = [*command, "-w", str(here / "workspace.yaml")]
    env["SAN_DATA_DIR"] = str(default_data_dir().resolve())
    return command, home, env


def stop_dagster_dev(ui: subprocess.Popen, grace_s: float = DAGSTER_DEV_GRACE_S) -> None:
    """SIGTERM to `dagster dev` alone (it tells its webserver and daemon to shut down), then,
    after `grace_s`, SIGKILL to whatever of its group is left. Signalling the whole group at
    once would interrupt every code server mid-thread (a traceback each)."""
    if ui.poll() is None:
        ui.send_signal(signal.SIGTERM)
        try:
            ui.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
    stop_group(ui, signal.SIGKILL, grace_s=1.0)


def stop_at_once(*stops: Callable[[], None]) -> None:
    """Run every stop at the same time, each in a thread of its own, and return when all are
    done: a stop takes as long as the slowest, not their sum."""
    threads = [threading.Thread(target=stop) for stop in stops]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def cancel_runs_cut_short(home: str | None, report=say) -> list[str]:
    """Mark CANCELED, with the reason, the runs of the instance at `home` that were in flight
    when `dagster dev` stopped (their processes are gone: nothing will end them otherwise)."""
    if not home:
        return []
    with DagsterInstance.from_config(home) as instance:
        cut_short = instance.get_runs(RunsFilter(statuses=list(CUT_SHORT)))
        for run in cut_short:
            instance.report_run_canceled(run, message=STOPPED_REASON)
    if cut_short:
        report(
            f"stopped: {len(cut_short)} run(s) in flight marked CANCELED ("
            + ", ".join(run.job_name for run in cut_short)
            + "): the next runs redo their work"
        )
    return [run.run_id for run in cut_short]


def demo_day(timezone: str | None = None) -> date:
    """Yesterday in SAN's zone: the demo's one TIL partition."""
    zone = ZoneInfo(timezone or san_timezone_name())
    return datetime.now(zone).date() - timedelta(days=1)


def _port(dagster_args: list[str]) -> int:
    for flag in ("--port", "-p"):
        if flag in dagster_args[:-1]:
            return int(dagster_args[dagster_args.index(flag) + 1])
    return 3000


def with_links_to(env: dict, port: int) -> dict:
    """The UI's address for the links of alerts and `explain` (SAN_DAGSTER_BASE_URL), from the
    port `make run` serves on, unless it is set; recorded in DAGSTER_HOME too, for an `explain`
    started from another shell."""
    env.setdefault("SAN_DAGSTER_BASE_URL", f"http://127.0.0.1:{port}")
    if env.get("DAGSTER_HOME"):
        Path(env["DAGSTER_HOME"], UI_ADDRESS_FILE).write_text(env["SAN_DAGSTER_BASE_URL"] + "\n")
    return env


class DemoTil(threading.Thread):
    """The demo's TIL run, launched once on its own: as soon as the sandbox's users have cards of
    yesterday (SAN's time), yesterday's partition is submitted through the webserver, unless the
    instance has a run of it already (a restarted `make run`). In production the 03:00 schedule
    does this; the demo cannot wait for 03:00."""

    def __init__(self, port: int, home: str | None, day: date, report=say):
        super().__init__(daemon=True, name="demo_til")
        self.port, self.home, self.day, self.report = port, home, day, report
        self.stopped = threading.Event()

    def run(self) -> None:
        try:
            self._launch_once()
        except Exception as error:  # the demo goes on without it; say why
            self.report(f"demo: yesterday's TIL run was not launched: {error}")

    def _users_with_cards(self) -> int:
        engine = create_san_engine(embedded_database_url())
        try:
            with engine.connect() as conn:
                users = detect_users_of_day(conn, *day_bounds(self.day, san_timezone_name()))
            return int((users["card_count"] > 0).sum())
        finally:
            engine.dispose()

    def _launched_before(self) -> bool:
        if not self.home:
            return False
        with DagsterInstance.from_config(self.home) as instance:
            return bool(
                instance.get_runs(
                    RunsFilter(job_name=TIL_JOB, tags={PARTITION_TAG: self.day.isoformat()}),
                    limit=1,
                )
            )

    def _launch_once(self) -> None:
        from dagster_graphql import DagsterGraphQLClient

        while not self.stopped.wait(DEMO_TIL_POLL_S):
            if self._launched_before():
                return
            if not self._users_with_cards():
                continue
            client = DagsterGraphQLClient("127.0.0.1", port_number=self.port)
            try:
                run_id = client.submit_job_execution(
                    TIL_JOB,
                    tags={
                        PARTITION_TAG: self.day.isoformat(),
                        PARTITION_SET_TAG: partition_set_name(TIL_JOB),
                    },
                )
            except Exception:  # the webserver is still loading the code location
                continue
            # SAN's day, not the machine's: in Asia/Seoul it is often a day ahead of UTC.
            self.report(
                f"demo: launched the TIL of {self.day} (yesterday in {san_timezone_name()}, "
                f"SAN's time zone): run {run_id}"
            )
            return


def start_metrics(env: dict) -> subprocess.Popen:
    """The metrics endpoint beside the UI (METRICS_PORT, default 9464), on the same database and
    instance: what SAN's Prometheus would scrape."""
    port = env.get("METRICS_PORT") or str(DEFAULT_METRICS_PORT)
    command = [sys.executable, "-m", "batch_pipeline", "metrics", "--port", port]
    say(f"metrics: Prometheus metrics on http://127.0.0.1:{port}/metrics")
    return start_group(command, env=env)


def run_ui(dagster_args: list[str], live: bool = True) -> int:
    """`dagster dev`, with a living sandbox beside it on the embedded default."""
    dagster = os.path.join(os.path.dirname(sys.executable), "dagster")
    command = [dagster, "dev", *(dagster_args or ["--host", "127.0.0.1", "--port", "3000"])]
    sandbox = None
    if not os.environ.get("SAN_DATABASE_URL"):
        engine = create_san_engine(embedded_database_url())
        try:
            seed_demo_state(engine)  # create and seed the embedded default first
        except NotASandbox as error:
            print(
                f"error: {error}. The embedded default was made by an older batch_pipeline: delete "
                f"{default_data_dir()} to start over",
                file=sys.stderr,
            )
            return 2
        finally:
            engine.dispose()
    else:
        say("SAN_DATABASE_URL is set: no sandbox, the UI works on that database")
    command, cwd, env = dagster_dev(command)
    demo = live and not os.environ.get("SAN_DATABASE_URL")
    if demo and not env.get("SAN_RECOVERY_CRON"):
        env["SAN_RECOVERY_CRON"] = LIVE_RECOVERY_CRON  # recovery keeps up with the fast clock
    if demo and not env.get("SAN_TIL_FIRST_DAY"):
        env["SAN_TIL_FIRST_DAY"] = demo_day().isoformat()  # the demo's one TIL partition
    with_links_to(env, _port(dagster_args or []))

    def stop_on(signum, _frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    # Ctrl-C and SIGTERM both stop; SIGINT is restored even where a background shell left it
    # ignored (`make run &`).
    previous = {sig: signal.signal(sig, stop_on) for sig in (signal.SIGTERM, signal.SIGINT)}
    ui = metrics = None
    try:
        if demo:
            sandbox = Supervised([sys.executable, "-m", "san_sandbox", "live"])
        metrics = start_metrics(env)
        # `dagster dev` in a process group of its own: the stop below reaches all of it.
        ui = start_group(command, cwd=cwd, env=env)
        say(
            f"the UI: http://127.0.0.1:{_port(dagster_args or [])} (ready in a minute or two). "
            + (
                "First look at Runs (recovery_job every minute, fast_heal_job between), then "
                "Catalog -> ghost_job_recovery -> Events. "
                if demo
                else ""
            )
            + "Ctrl-C stops all of it."
        )
        if demo:
            til = DemoTil(_port(dagster_args or []), env.get("DAGSTER_HOME"), demo_day())
            til.start()
        code = wait_interruptibly(ui)
        say(f"dagster dev exited by itself (exit {code})")
        return code
    except KeyboardInterrupt:
        started = time.monotonic()
        # A second Ctrl-C (or a SIGTERM after it) would interrupt the bounded stop half-way.
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)
        say("stopping: the living sandbox and dagster dev …")
        stops = [] if sandbox is None else [sandbox.stop]
        if metrics is not None:
            stops.append(lambda: stop_group(metrics))
        if ui is not None:
            stops.append(lambda: stop_dagster_dev(ui))
        stop_at_once(*stops)
        sandbox = None
        cancel_runs_cut_short(env.get("DAGSTER_HOME"))
        say(f"stopped in {time.monotonic() - started:.1f} s")
        return 0
    finally:
        if sandbox is not None:
            sandbox.stop()
        if metrics is not None and metrics.poll() is None:
            stop_group(metrics)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
