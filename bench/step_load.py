"""How fast the throttle follows the app: a recovery_job healing an idle database when the app's
traffic steps from nothing to `--rate` transactions per second, holds for `--load-for` seconds,
and stops again.

On a fresh copy of bench.app_latency's template (`--scale`; one this call seeds is dropped at
the end unless `--keep-template`; the scale is not checked against a kept one): pgbench
plays the app alone (APP_SCRIPT) at `--rate` for `--quiet` seconds, the quiet reference of its
p99; then the run starts (caps lifted, in a process of its own through Dagster) on the idle
database; `--step-at` seconds after its first write, pgbench starts again at `--rate`, for
`--load-for` seconds. The run's writes are read back from SAN's rows afterwards: the jobs it
created (every job created meanwhile but pgbench's, which are SCRAP_REFINE jobs for scraps
pgbench made), by the transaction that created them, per BUCKET_S. Prints the run's writes per
second before the step, in the 2 s after it and from 2 s after it to the end of the load, and
after the load; how long after the step its write rate first fell below half of what it was,
and how long after the load ended it first came back to half of it; and the app's p99 over
the first JUDGED_S of the load against its quiet p99, also past the load's first WARM_UP_S (the
quiet p99 leaves the app's first seconds out: a cold start is not the run's doing; their own p99
is printed beside it), and per
second of the load the transactions over SLOW_OVER times the quiet p99 (where the tail falls).
The same step with no run is the control: after the app alone and CONTROL_PAUSE_S of idle,
pgbench starts again for the judged window, and its p99 and slow seconds are printed beside the
step's: what the app's own restart costs it (connections, its first transactions), which the
step's first seconds hold too.
The same for the run's share of time at work (RUN_AT_WORK sampled: its detections' chunks too,
which create no job). The last line is machine-readable:

    drop_after_s=D back_after_s=B at_work_drop_after_s=D2 at_work_back_after_s=B2
    quiet_p99_ms=Q load_p99_ms=L ratio=R control_p99_ms=C control_ratio=R2

    .venv/bin/python -m bench.step_load [--scale 1] [--rate 300] [--step-at 2] [--load-for 40]
"""

import subprocess
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from batch_pipeline.san.dialects.postgresql.load import APPLICATION_NAME
from bench.app_latency import (
    AS_THE_RUN,
    app_parser,
    borrowed_template,
    given_back,
    latencies,
    percentile,
    pgbench_command,
    recovery_process,
    settle_the_disk,
    template_options,
)
from bench.runner import LIFTED, db_url, psycopg_conninfo
from bench.seed import Scale

BUCKET_S = 0.5
JUDGED_S = 30.0  # the app's p99 over this much of the load
# the app alone's first seconds are left out of its p99 (connections, cold pages); the load's
# p99 is also printed with them left out, which tells a cold start from what the run left
WARM_UP_S = 5.0
SLOW_OVER = 1.5  # a transaction this many times the quiet p99 is counted per second of the load
# the control's idle between the app alone and its step: about the run's start to its first write
CONTROL_PAUSE_S = 5.0
# the run's jobs: every job created since it started but pgbench's (the refine jobs of scraps
# pgbench created, past the copy's last scrap)
RUN_WRITES = """
    SELECT extract(epoch FROM created_at) FROM jobs
     WHERE created_at >= to_timestamp(%(since)s)
       AND NOT (job_type = 'SCRAP_REFINE' AND target_id > %(last_scrap)s)
"""
LAST_SCRAP = "SELECT coalesce(max(id), 0) FROM scraps"
# Is the run at work (a statement of its own running: a detection's chunk or a write batch; not
# its throttle's probe): sampled every AT_WORK_EVERY_S, its share of a window is the run's pace,
# detections included (a sweep creates no jobs). The sampler is named as the run's sessions are
# (AS_THE_RUN), and excludes itself.
AT_WORK_EVERY_S = 0.05
RUN_AT_WORK = """
    SELECT count(*) FROM pg_stat_get_activity(NULL)
     WHERE application_name = %(ours)s AND state = 'active'
       AND pid <> pg_backend_pid() AND query NOT LIKE '%%txid_current%%'
"""
# the run's first job (pgbench is stopped until then): one step of the primary key, not a scan
# of the jobs table's 5 M rows, which held a core every 50 ms beside the run's first detection
# (unprepared: psycopg's generic plan of `id > $1` after five calls was that scan)
LAST_JOB = "SELECT coalesce(max(id), 0) FROM jobs"
FIRST_WRITE = "SELECT 1 FROM jobs WHERE id > %(last_job)s LIMIT 1"


class RunAtWork(threading.Thread):
    """Samples RUN_AT_WORK until stopped: (instant, the run at work) pairs."""

    def __init__(self, conninfo: dict):
        super().__init__(daemon=True)
        self.conninfo, self.samples, self.stop = conninfo, [], threading.Event()

    def run(self) -> None:
        with psycopg.connect(**self.conninfo, autocommit=True, **AS_THE_RUN) as conn:
            while not self.stop.is_set():
                working = conn.execute(RUN_AT_WORK, {"ours": APPLICATION_NAME}).fetchone()[0]
                self.samples.append((time.time(), working > 0))
                self.stop.wait(AT_WORK_EVERY_S)


def pgbench(args, script: Path, folder: Path, database: str, seconds: float) -> subprocess.Popen:
    conninfo = psycopg_conninfo(db_url(args.server_url, database))
    return subprocess.Popen(
        pgbench_command(args, script, folder, conninfo, database, seconds),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def app_alone(args, script: Path, database: str) -> tuple[list[float], list[float]]:
    """The app's latencies at `--rate` with nothing else running: past its first WARM_UP_S
    (the quiet reference), and in them (its own cold start, shown beside the load's)."""
    folder = Path(tempfile.mkdtemp(prefix="step_quiet_"))
    started = time.time()
    pgbench(args, script, folder, database, args.quiet).communicate(timeout=args.quiet + 60)
    rows = latencies(folder)
    return (
        [ms for ended, ms in rows if ended >= started + WARM_UP_S],
        [ms for ended, ms in rows if ended < started + WARM_UP_S],
    )


def stepped_load(args, script: Path, database: str, seconds: float) -> tuple[float, list]:
    """pgbench started at `--rate` for `seconds`: (the step's instant, [(seconds since the step,
    ms)] over its first JUDGED_S)."""
    folder = Path(tempfile.mkdtemp(prefix="step_load_"))
    step = time.time()
    pgbench(args, script, folder, database, seconds).communicate(timeout=seconds + 60)
    return step, [
        (ended - step, ms) for ended, ms in latencies(folder) if step <= ended < step + JUDGED_S
    ]


def the_step_alone(args, script: Path, database: str) -> list[tuple[float, float]]:
    """The control: the app stepped up again with no run, its first JUDGED_S."""
    time.sleep(CONTROL_PAUSE_S)
    return stepped_load(args, script, database, min(JUDGED_S, args.load_for))[1]


def the_step(args, script: Path, database: str, conninfo: dict):
    """The run on the idle database, the load stepped up and down during it: (run started,
    step, load ended, run ended, the load's latencies, success)."""
    run, go, results = recovery_process(
        db_url(args.server_url, database), None, dict(LIFTED), pgoptions=args.run_pgoptions
    )
    at_work = RunAtWork(conninfo)
    at_work.start()
    # AS_THE_RUN: the throttle must not take this poll for the app at work
    with psycopg.connect(**conninfo, autocommit=True, **AS_THE_RUN) as conn:
        found = {"last_job": conn.execute(LAST_JOB).fetchone()[0]}
        go.set()
        while run.is_alive() and not conn.execute(FIRST_WRITE, found, prepare=False).fetchone():
            time.sleep(0.05)  # a run that wrote nothing steps the load when it ends
    time.sleep(args.step_at)
    step, load = stepped_load(args, script, database, args.load_for)
    load_ended = time.time()
    run_started, run_ended, success, *_ = results.get(timeout=3_600)
    run.join()
    at_work.stop.set()
    at_work.join()
    return run_started, step, load_ended, run_ended, load, success, at_work.samples


def rate(instants: list[float], start: float, end: float) -> float:
    return sum(start <= at < end for at in instants) / max(end - start, 1e-9)


def at_work_share(samples: list[tuple[float, bool]], start: float, end: float) -> float:
    """The share of the samples in [start, end) that found the run at work."""
    window = [working for at, working in samples if start <= at < end]
    return sum(window) / len(window) if window else 0.0


def first_bucket(pace, start: float, end: float, test) -> float | None:
    """Seconds from `start` to the first BUCKET_S whose `pace(start, end)` passes `test`."""
    at = start
    while at < end:
        if test(pace(at, at + BUCKET_S)):
            return at - start
        at += BUCKET_S
    return None


def paces(name: str, pace, unit: str, step, load_ended, run_ended, first) -> tuple:
    """Print `pace` over the step's windows; (seconds after the step to below half of its pace
    before it, seconds after the load to at least half again), None where never."""
    before = pace(first, step)
    windows = {
        "from its first to the step": (first, step),
        "the 2 s after it": (step, step + 2),
        "2 s after it to the load's end": (step + 2, load_ended),
        "after the load": (load_ended, run_ended),
    }
    for window, (start, end) in windows.items():
        print(f"  run's {name} {window:32s} {pace(start, end):9,.2f} {unit}")
    drop = first_bucket(pace, step, load_ended, lambda r: r < before / 2)
    back = first_bucket(pace, load_ended, run_ended, lambda r: r >= before / 2)
    return drop, back


def said(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:.1f}"


def slow_seconds(load: list[tuple[float, float]], over_ms: float) -> str:
    """Per second of a load, its transactions over `over_ms`."""
    slow = Counter(int(since) for since, ms in load if ms > over_ms)
    return " ".join(f"{second}s:{count}" for second, count in sorted(slow.items())) or "none"


def report(instants, at_work, started, step, load_ended, run_ended, alone, load, control) -> str:
    first_write = min(instants, default=step)
    drop, back = paces(
        "writes", lambda a, b: rate(instants, a, b), "rows/s", step, load_ended, run_ended,
        first_write,
    )  # fmt: skip
    print(f"  run's time at work: {len(at_work)} samples, {AT_WORK_EVERY_S:g} s apart")
    at_work_drop, at_work_back = paces(
        "time at work", lambda a, b: at_work_share(at_work, a, b), "share", step, load_ended,
        run_ended, started,
    )  # fmt: skip
    quiet, cold = alone
    quiet_p99 = percentile(quiet, 0.99)
    load_p99 = percentile([ms for _, ms in load], 0.99)
    warm = [ms for since, ms in load if since >= WARM_UP_S]
    print(f"  app alone         {len(quiet):6d} tx  p99 {quiet_p99:6.2f} ms")
    print(
        f"  app alone, first {WARM_UP_S:g} s {len(cold):6d} tx  "
        + (f"p99 {percentile(cold, 0.99):6.2f} ms" if cold else "(none)")
        + "  (left out of the line above: the app's own start)"
    )
    print(f"  app, first {JUDGED_S:.0f} s  {len(load):6d} tx  p99 {load_p99:6.2f} ms")
    print(
        f"  app, {WARM_UP_S:g} s to {JUDGED_S:.0f} s  {len(warm):6d} tx  "
        + (f"p99 {percentile(warm, 0.99):6.2f} ms" if warm else "(none)")
    )
    control_p99 = percentile([ms for _, ms in control], 0.99)
    print(
        f"  app, first {JUDGED_S:.0f} s, no run {len(control):6d} tx  p99 {control_p99:6.2f} ms"
        "  (the same step with no run: the app's own restart)"
    )
    over = SLOW_OVER * quiet_p99
    print(
        f"  over {SLOW_OVER:g}x the quiet p99, per second of the load: {slow_seconds(load, over)}"
    )
    print(f"  ... and of the same step with no run:         {slow_seconds(control, over)}")
    return (
        f"drop_after_s={said(drop)} back_after_s={said(back)} "
        f"at_work_drop_after_s={said(at_work_drop)} at_work_back_after_s={said(at_work_back)} "
        f"quiet_p99_ms={quiet_p99:.2f} load_p99_ms={load_p99:.2f} ratio={load_p99 / quiet_p99:.2f}"
        f" control_p99_ms={control_p99:.2f} control_ratio={control_p99 / quiet_p99:.2f}"
    )


def main(argv=None) -> int:
    parser = app_parser("python -m bench.step_load", __doc__, rate=300.0)
    parser.add_argument("--quiet", type=float, default=40.0, help="seconds of the app alone")
    parser.add_argument("--step-at", type=float, default=2.0, help="seconds after the 1st write")
    parser.add_argument("--load-for", type=float, default=40.0)
    parser.add_argument("--repeats", type=int, default=1)
    template_options(parser)
    args = parser.parse_args(argv)
    scale = Scale(args.scale)
    server, template, seeded_here, script = borrowed_template(args, scale, "step_")
    with server.autovacuum(args.autovacuum):
        return stepped(args, server, template, seeded_here, script)


def stepped(args, server, template: str, seeded_here: bool, script: Path) -> int:
    """Every repeat's step on a fresh copy of the template."""
    copy = f"{args.prefix}_step"
    print(
        f"# the app stepping 0 -> {args.rate:g} tx/s -> 0 during a recovery_job: scale "
        f"{args.scale}, caps lifted, load {args.load_for:g} s from {args.step_at:g} s after the "
        f"run's first write; {datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    )
    print(server.settings_line())
    try:
        for repeat in range(1, args.repeats + 1):
            server.create(copy, template=template)
            settle_the_disk()
            conninfo = psycopg_conninfo(db_url(args.server_url, copy))
            with psycopg.connect(**conninfo, autocommit=True) as conn:
                last_scrap = conn.execute(LAST_SCRAP).fetchone()[0]
            alone = app_alone(args, script, copy)
            control = the_step_alone(args, script, copy)
            started, step, load_ended, ended, load, success, at_work = the_step(
                args, script, copy, conninfo
            )
            with psycopg.connect(**conninfo, autocommit=True) as conn:
                found = conn.execute(RUN_WRITES, {"since": started, "last_scrap": last_scrap})
                instants = [float(row[0]) for row in found]
            print(
                f"repeat {repeat}: recovery_job {'success' if success else 'FAILED'} in "
                f"{ended - started:.1f} s, {len(instants):,} jobs created; the load from "
                f"{step - started:.1f} s to {load_ended - started:.1f} s"
            )
            print(report(instants, at_work, started, step, load_ended, ended, alone, load, control))
    finally:
        given_back(server, template, seeded_here, args, copy)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
