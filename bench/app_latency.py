"""What SAN's users feel while batch_pipeline heals: the app's transaction latency, played by
pgbench at a fixed rate, quiet and during a recovery_job run.

Seeds a scratch database at `--scale` (bench/seed.py, the app's DDL; the recommended indexes
unless `--without-indexes`) and keeps it as a template. Then, `--repeats` times on a fresh copy
(copied file by file, and the disk left to settle before anything is timed): pgbench plays the
app (APP_SCRIPT: a user opens a scrap with its card, saves a new scrap with its refine job, a
worker claims, refines and completes it) at `--rate` transactions per second from `--clients`
clients; after `--quiet` seconds a recovery_job starts (in a process of its own through Dagster,
the per-run caps lifted as in `bench`, so it heals every target at once); pgbench runs on for as
long as the run and `--after` seconds more. Every transaction's latency (pgbench's
per-transaction log, measured from its scheduled start, as a user waits) is put in the window it
ended in: quiet (before the run), during the run, while the process that ran it ends (a run
worker ends on a Dagster host; here on the database's cores, and the app feels it), or after it
(the kernel writes back what a run left dirty in the page cache up to 30 s later, and the app
feels that too). The header reads `--rate` against the app's peak (pgbench with no rate set,
`--peak-seconds` on a fresh copy): a rate near it is one the database barely holds;
`--rate-of-peak S` plays the app at S times that peak instead of `--rate` (the peak moves from
one machine, and one hour, to the next: "the rate the database barely holds" is a share of it,
not a fixed rate). Prints, per
repeat and over all: p50, p99 and max of each window (during the
run also per op), the share of the machine's CPU the host stole meanwhile (other guests of a
shared host: a repeat with over 5 % is called out), the disks' mean time per write and the
slowest of a 4 kB synced write every 0.1 s (a quiet window with one over 50 ms is called out:
the host's disk stalled), the run's seconds, targets healed and the WAL written meanwhile; the
last line is machine-readable:

    quiet_p99_ms=Q during_p99_ms=D ratio=R after_p99_ms=A after_ratio=R2

`--sample-waits` also prints what the app's backends waited on in each window
(pg_stat_activity, every 10 ms; the sampling costs the app a little latency of its own), and
what the run's sessions were doing while the app's slow transactions (over twice the quiet
p99) ran, against the share of the run each thing took: where the app's tail comes from.
Each repeat also prints its run's start and end (UTC) and where pgbench's per-transaction logs
are: `python -m bench.timeline` reads them minute by minute beside the server's checkpoints and
autovacuums.
The run's progress lines (san/progress.py, every 30 s of a long write or sweep) are printed as
they come; a repeat whose run outlives `--budget` seconds is given up (left out of the figures,
its progress lines kept) and the next one starts.
The header names the server settings a latency figure depends on (autovacuum, shared_buffers,
max_wal_size, checkpoint_timeout); autovacuum off, as on a test server, is called out: over a
long run the app's dead rows then pile up in its tables and indexes, which production clears.
`--rate 0` plays no app: the run alone on an idle database, the runs' seconds its figures
(last line `idle: run_seconds=S[,S...]`).
`--keep-template` keeps the seeded template for the next call with the flag (seeding scale 1
takes a minute and a half).
`--parallel-workers N` replays the code with N parallel workers per query of the run (0 is what
batch_pipeline sets; PostgreSQL's default is 2). docs/benchmarks.md, "The app's latency while
batch_pipeline heals", holds runs.

    .venv/bin/python -m bench.app_latency [--scale 1] [--rate 150] [--clients 4] [--repeats 3]
"""

import argparse
import json
import logging
import multiprocessing
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from batch_pipeline.san import progress
from batch_pipeline.san.database import create_san_engine
from batch_pipeline.san.dialects.postgresql.load import APPLICATION_NAME
from batch_pipeline.san.schema import create_recommended_indexes
from bench.runner import (
    AS_SET,
    DEFAULT_SERVER_URL,
    LIFTED,
    Server,
    bench_parser,
    db_url,
    psycopg_conninfo,
    run_pipeline,
    step_spans,
    terminated_as_exit,
)
from bench.seed import Scale, seed

PREFIX = "bench_app_latency"
# SAN's app as the database sees it: primary-key reads and single-row writes, a few
# transactions each (the app's DDL has no other index to use).
APP_SCRIPT = """
\\set sid random(1, {scraps})
\\set uid random(1, {users})
SELECT s.id, s.refined_content, k.title, k.summary
  FROM scraps s LEFT JOIN knowledge_cards k ON k.scrap_id = s.id WHERE s.id = :sid;
BEGIN;
INSERT INTO scraps (user_id, original_content) VALUES (:uid, 'a page the user kept')
  RETURNING id AS new_scrap \\gset
INSERT INTO jobs (job_type, target_id, status) VALUES ('SCRAP_REFINE', :new_scrap, 'PENDING')
  RETURNING id AS job \\gset
COMMIT;
UPDATE jobs SET status = 'PROCESSING', started_at = now(), updated_at = now()
  WHERE id = :job AND status = 'PENDING';
BEGIN;
UPDATE scraps SET refined_content = 'refined', updated_at = now() WHERE id = :new_scrap;
UPDATE jobs SET status = 'COMPLETED', finished_at = now(), updated_at = now() WHERE id = :job;
COMMIT;
"""
# the WAL written while the run ran (the app's share is small: 150 transactions a second)
# The bench's own sessions on SAN's database, named as the run's: the throttle takes a session
# of any other name that ran a statement within the last second for the app at work.
AS_THE_RUN = {"application_name": APPLICATION_NAME}
WAL_POSITION = "SELECT pg_current_wal_insert_lsn()"
WAL_SINCE = "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s)::bigint"
# the app's traffic alone before the run: its p99 is the ~80th slowest of ~8,000 transactions,
# where 30 s made it the ~37th and one stall of the host's disk could set it
QUIET_S = 60.0
# the first seconds of the app's traffic on a fresh copy: connections, cold pages
WARM_UP_S = 5.0
# after the run: the app's traffic on, its own window: the kernel writes back what the run left
# dirty in the page cache up to vm.dirty_expire_centisecs (30 s) later, and the app feels that too
AFTER_S = 40.0
# how long pgbench runs with no rate set to find the app's peak (its tps settles within seconds)
PEAK_S = 20.0
# before each repeat's quiet window, the disk gets this long to write out what came before
SETTLE_AT_MOST_S = 60
SETTLED_MB_PER_S = 1
# a window with more of the CPU stolen by the host (other guests) is called out as noisy
NOISY_STEAL = 0.05
# a quiet window in which a 4 kB synced write took longer saw the host's disk stall (this
# machine's take about 0.1 ms)
STALLED_FSYNC_MS = 50.0
# pgbench's duration is fixed up front: the quiet window plus what a run may take at most (a
# busy run rests about 30 times its work: a default-cap run at 150 tx/s took 7-11 minutes on a
# slower machine, and 600 s gave up runs that were a minute from their end)
RUN_BUDGET_S = 1800


def replay_parallel_workers(workers: int) -> None:
    """Start every transaction of this process with `workers` parallel workers per query."""
    from batch_pipeline.san.dialects.postgresql import session

    session.BEGIN_SETTINGS += f", set_config('max_parallel_workers_per_gather', '{workers}', true)"


def recovery_config(args) -> dict:
    """The recovery op's config: the per-run caps lifted, then `--run-config` on top."""
    return {**LIFTED, **json.loads(args.run_config)}


def one_recovery_run(
    url: str, parallel_workers: int | None, config: dict, apart: bool, pgoptions: str, ready, go,
    results,
) -> None:  # fmt: skip
    """A recovery_job when `go` is set, in a process of its own: Dagster's imports happen
    before the app's traffic starts, not in its quiet window."""
    if parallel_workers is not None:
        replay_parallel_workers(parallel_workers)
    if apart:
        run_last()
    if pgoptions:  # libpq reads it: the run's sessions only, not the app's
        os.environ["PGOPTIONS"] = pgoptions
    # the run's progress lines (san/progress.py) as they come: a repeat given up keeps them
    said = logging.StreamHandler(sys.stdout)
    said.setFormatter(logging.Formatter("  run %(asctime)s %(message)s", "%H:%M:%S"))
    progress.log.addHandler(said)
    ready.set()
    go.wait()
    started = time.time()
    elapsed, result, instance = run_pipeline("recovery_job", url, config)
    healed, paced = 0, {}
    for event in result.all_events:  # a failed run's areas too
        if event.event_type_value == "ASSET_MATERIALIZATION":
            materialization = event.event_specific_data.materialization
            if "enqueued" in materialization.metadata:
                healed += int(materialization.metadata["enqueued"].value)
            area = materialization.asset_key.to_user_string()
            for key, name in (("throttle", area), ("detection_throttle", f"{area} detection")):
                if key in materialization.metadata:
                    paced[name] = materialization.metadata[key].value
    steps = step_spans(instance, result.run_id, ended=("STEP_SUCCESS", "STEP_FAILURE"))
    results.put((started, time.time(), result.success, elapsed, healed, steps, paced))


def run_last() -> None:
    """This process runs only where no other wants a core, as if on a host of its own: in a
    session of its own (Linux's autogroups weigh each session as one: a nice inside the bench's
    session never ranked it below PostgreSQL's), at SCHED_IDLE where Linux has it, at nice 19.
    On a virtual machine whose host caps its CPU, no priority keeps its cycles from the
    database's: bench/cpu_share.py measures whether this one does."""
    os.setsid()
    autogroup = Path("/proc/self/autogroup")
    if autogroup.exists():
        autogroup.write_text("19")
    if hasattr(os, "SCHED_IDLE"):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    os.nice(19)


def recovery_process(
    url: str, parallel_workers: int | None, config: dict, apart: bool = False, pgoptions: str = ""
):
    """`one_recovery_run` in a process of its own, started and ready: (the process, the event
    that starts the run, the queue its results come on)."""
    context = multiprocessing.get_context("spawn")
    ready, go, results = context.Event(), context.Event(), context.Queue()
    run = context.Process(  # daemon: a bench stopped (SIGTERM) stops it, not waits for it
        target=one_recovery_run,
        args=(url, parallel_workers, config, apart, pgoptions, ready, go, results),
        daemon=True,
    )
    run.start()
    ready.wait(timeout=300)
    return run, go, results


class WaitSampler(threading.Thread):
    """What the app's backends are doing, sampled every SAMPLE_EVERY_S: (time, wait) for each
    pgbench backend inside a statement, wait as pg_stat_activity names it ('CPU' when it names
    none: running or waiting for a core); and what the run's sessions are doing at the same
    moments (`run_doing`), to say what the app's slow transactions overlapped."""

    SAMPLE_EVERY_S = 0.01
    SAMPLE = (
        "SELECT application_name, wait_event_type, wait_event, left(query, 60)"
        " FROM pg_stat_activity WHERE state = 'active'"
        " AND application_name IN ('pgbench', 'batch_pipeline') AND pid <> pg_backend_pid()"
    )

    def __init__(self, conninfo: dict):
        super().__init__(daemon=True)
        self.conninfo, self.samples, self.stop = conninfo, [], threading.Event()
        self.run_doing: list[tuple[float, str]] = []

    def run(self) -> None:
        with psycopg.connect(**self.conninfo, autocommit=True, **AS_THE_RUN) as conn:
            while not self.stop.is_set():
                now, run_doing = time.time(), []
                for application, wait_type, wait, query in conn.execute(self.SAMPLE):
                    wait = f"{wait_type}:{wait}" if wait_type else "CPU"
                    if application == "pgbench":
                        self.samples.append((now, wait))
                    else:
                        run_doing.append(f"{statement_kind(query)} ({wait})")
                self.run_doing.append((now, " + ".join(sorted(run_doing)) or "nothing"))
                time.sleep(self.SAMPLE_EVERY_S)

    def shares(self, start: float, end: float) -> str:
        """Each wait's share of the samples in [start, end), and how many backends were inside
        a statement on average."""
        counted = Counter(wait for at, wait in self.samples if start <= at < end)
        total = sum(counted.values())
        busy = total * self.SAMPLE_EVERY_S / max(end - start, 1e-9)
        shares = ", ".join(f"{wait} {n / max(total, 1):.0%}" for wait, n in counted.most_common(6))
        return f"{shares} ({total} samples, {busy:.2f} backends busy on average)"

    def overlapped(self, slow: list[tuple[float, float]], start: float, end: float) -> str:
        """What the run's sessions were doing while the slow transactions ((ended at, ms)) ran,
        against the share of [start, end) they spent doing it."""
        doing = [(at, what) for at, what in self.run_doing if start <= at < end]
        base = Counter(what for _, what in doing)
        during_slow: Counter = Counter()
        for ended, ms in slow:
            during_slow.update({what for at, what in doing if ended - ms / 1000 <= at <= ended})
        lines = [
            f"{what}: in {n / max(len(slow), 1):.0%} of them, {base[what] / max(len(doing), 1):.0%}"
            " of the run's time"
            for what, n in during_slow.most_common(8)
        ]
        return "\n      ".join(lines) or "no sample"


def statement_kind(query: str) -> str:
    """A run's statement by its first words: 'COMMIT', 'SELECT pg_sleep', 'INSERT INTO jobs'."""
    words = " ".join(query.split()).split(" ")
    return " ".join(words[:3] if words[0].upper() in ("INSERT", "UPDATE", "WITH") else words[:2])


def disk_writes() -> tuple[int, int, int]:
    """What this machine's whole disks have written so far (/proc/diskstats): writes
    completed, milliseconds spent writing, sectors written. Only the difference between two
    readings means anything."""
    disks = {path.name for path in Path("/sys/block").iterdir()} - VIRTUAL_DISKS
    writes = write_ms = sectors = 0
    for fields in (line.split() for line in Path("/proc/diskstats").read_text().splitlines()):
        if len(fields) > 10 and fields[2] in disks:
            writes, write_ms = writes + int(fields[7]), write_ms + int(fields[10])
            sectors += int(fields[9])
    return writes, write_ms, sectors


def settle_the_disk() -> None:
    """Wait until the disk is quiet (a second with under SETTLED_MB_PER_S written, at most
    SETTLE_AT_MOST_S): a new copy, the last repeat's dropped database and its WAL are written
    out, trimmed and deleted before the quiet window starts, not in it."""
    os.sync()
    deadline = time.monotonic() + SETTLE_AT_MOST_S
    before = disk_writes()[2]
    while time.monotonic() < deadline:
        time.sleep(1)
        now = disk_writes()[2]
        if (now - before) * 512 < SETTLED_MB_PER_S * 1e6:
            return
        before = now


class HostMeter:
    """What the host did to the machine between marks: the share of CPU time a hypervisor gave
    other guests (steal, /proc/stat), how long the disks took per write (/proc/diskstats,
    whole disks), and the slowest of a small synced write every FSYNC_PROBE_EVERY_S (a file
    in the temporary folder: on this machine, the database's disk). On a shared host all three
    come and go, and a window with much of any measures the host, not the run (the app's p99
    went from 3 to 50 ms in a quiet window with 30 % steal, and to 200 ms in one where the
    disk stalled, its mean time per write unchanged)."""

    FSYNC_PROBE_EVERY_S = 0.1

    def __init__(self):
        self.marks: dict[str, tuple[float, int, int, int, int]] = {}
        self.fsyncs: list[tuple[float, float]] = []
        self.stopped = threading.Event()
        self.probe = threading.Thread(target=self._probe_fsync, daemon=True)
        self.probe.start()

    def _probe_fsync(self) -> None:
        with tempfile.TemporaryFile() as probe:
            while not self.stopped.wait(self.FSYNC_PROBE_EVERY_S):
                started = time.time()
                probe.seek(0)
                probe.write(b"\0" * 4096)
                probe.flush()
                os.fdatasync(probe.fileno())
                self.fsyncs.append((started, (time.time() - started) * 1000))

    def stop(self) -> None:
        self.stopped.set()
        self.probe.join()

    def mark(self, name: str) -> None:
        cpu = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
        writes, write_ms, _ = disk_writes()
        # user … steal (guest is within user), writes completed, milliseconds spent writing
        self.marks[name] = (time.time(), sum(cpu), cpu[7], writes, write_ms)

    def steal(self, start: str, end: str) -> float:
        (_, cpu_0, steal_0, *_), (_, cpu_1, steal_1, *_) = self.marks[start], self.marks[end]
        return (steal_1 - steal_0) / max(cpu_1 - cpu_0, 1)

    def slowest_fsync_ms(self, start: str, end: str) -> float:
        since, until = self.marks[start][0], self.marks[end][0]
        return max((ms for at, ms in self.fsyncs if since <= at < until), default=0.0)

    def describe(self, start: str, end: str) -> str:
        (*_, writes_0, ms_0), (*_, writes_1, ms_1) = self.marks[start], self.marks[end]
        per_write = (ms_1 - ms_0) / max(writes_1 - writes_0, 1)
        return (
            f"steal {self.steal(start, end):4.0%}  disk {per_write:5.2f} ms per write, "
            f"slowest fsync {self.slowest_fsync_ms(start, end):6.1f} ms"
        )

    def spoiled_the_quiet_window(self) -> bool:
        return (
            self.steal("quiet", "during") > NOISY_STEAL
            or self.slowest_fsync_ms("quiet", "during") > STALLED_FSYNC_MS
        )


# block devices that are no disk of their own
VIRTUAL_DISKS = {*(f"loop{n}" for n in range(64)), *(f"ram{n}" for n in range(64))}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latencies(log_folder: Path) -> list[tuple[float, float]]:
    """(ended at, latency ms) of every transaction in pgbench's per-transaction logs: client,
    transaction, latency µs, script, epoch s, µs[, schedule lag]."""
    rows = []
    for log in log_folder.glob("app.*"):
        for line in log.read_text().splitlines():
            fields = line.split()
            if len(fields) >= 6:  # not the line pgbench was writing when it was stopped
                rows.append((int(fields[4]) + int(fields[5]) / 1e6, int(fields[2]) / 1000))
    return rows


def summary(values: list[float]) -> str:
    if not values:
        return "no transactions"
    return (
        f"{len(values):5d} tx  p50 {percentile(values, 0.5):6.2f} ms  "
        f"p99 {percentile(values, 0.99):6.2f} ms  max {max(values):7.2f} ms"
    )


def pgbench_command(
    args, script: Path, folder: Path | None, conninfo: dict, database: str, seconds: float
) -> list[str]:
    """pgbench playing the app (`script`) at `--rate` from `--clients` for `seconds`, logging
    each transaction under `folder` (read back by `latencies`); without a folder, as fast as it
    goes and unlogged (`peak_rate`)."""
    paced = (
        ["--rate", str(args.rate), "--log", "--log-prefix", str(folder / "app")] if folder else []
    )
    return [
        "pgbench", "--no-vacuum", "--file", str(script), "--client", str(args.clients),
        "--jobs", str(min(args.clients, 2)), *paced,
        "--time", str(int(seconds)),
        "--host", conninfo.get("host", "127.0.0.1"), "--port", str(conninfo.get("port", 5432)),
        "--username", conninfo.get("user", "postgres"), database,
    ]  # fmt: skip


def peak_rate(server: Server, template: str, args, script: Path, seconds: float) -> float:
    """The app's transactions per second with no rate set, on a fresh copy of the template:
    the most this database serves it here, what `--rate` is read against (a rate near it is
    one the database barely holds)."""
    copy = f"{args.prefix}_peak"
    server.create(copy, template=template)
    settle_the_disk()
    try:
        conninfo = psycopg_conninfo(db_url(args.server_url, copy))
        return unthrottled_tps(args, script, conninfo, copy, seconds)
    finally:
        server.drop(copy)


def unthrottled_tps(args, script: Path, conninfo: dict, database: str, seconds: float) -> float:
    """pgbench playing the app with no rate set for `seconds`: its transactions per second."""
    done = subprocess.run(
        pgbench_command(args, script, None, conninfo, database, seconds),
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    [tps] = re.findall(r"^tps = ([0-9.]+)", done.stdout, re.MULTILINE)
    return float(tps)


def one_repeat(
    server: Server, template: str, args, script: Path, folder: Path
) -> tuple[list, list, list, tuple, dict] | None:
    """The repeat's windows and figures; None when its run outlived `--budget` (given up: the
    run's progress lines printed meanwhile say where it was)."""
    copy = f"{args.prefix}_run"
    server.create(copy, template=template)
    settle_the_disk()
    url = db_url(args.server_url, copy)
    conninfo = psycopg_conninfo(url)
    for old in folder.glob("app.*"):
        old.unlink()
    run, go, results = recovery_process(
        url, args.parallel_workers, recovery_config(args), args.hosts_apart, args.run_pgoptions
    )
    pgbench = None  # `--rate 0`: no app, the run alone on an idle database
    if args.rate > 0:
        pgbench = subprocess.Popen(
            [
                *(["nice", "-n", "-10"] if args.hosts_apart else []),
                *pgbench_command(
                    args, script, folder, conninfo, copy, args.quiet + args.budget + args.after
                ),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
    pgbench_started = time.time()
    sampler = WaitSampler(conninfo) if args.sample_waits else None
    if sampler:
        sampler.start()
    host = HostMeter()
    time.sleep(WARM_UP_S)
    host.mark("quiet")
    time.sleep(max(args.quiet - WARM_UP_S, 0))
    with psycopg.connect(**conninfo, autocommit=True, **AS_THE_RUN) as conn:
        wal_before = conn.execute(WAL_POSITION).fetchone()[0]
        host.mark("during")
        go.set()
        try:
            run_started, run_ended, success, elapsed, changed, steps, paced = results.get(
                timeout=args.budget
            )
        except queue.Empty:
            given_up(run, pgbench, host, sampler)
            server.drop(copy)
            return None
        for area, log in paced.items():  # how the throttle paced each area, and why
            print(
                f"  throttle {area}: {log.get('batches')} batches, {log.get('rows')} rows, wrote "
                f"{log.get('write_seconds')} s, rested {log.get('rest_seconds')} s, "
                f"{log.get('readings')} readings, zones {log.get('batches_by_zone')}"
                + (f"; slowed: {log['why_it_slowed']}" if log.get("why_it_slowed") else "")
            )
        host.mark("after")
        wal_mb = conn.execute(WAL_SINCE, (wal_before,)).fetchone()[0] / 1e6
    print(  # where bench.timeline reads the app's minutes beside the server's log
        f"  run from {datetime.fromtimestamp(run_started, UTC):%H:%M:%S} to "
        f"{datetime.fromtimestamp(run_ended, UTC):%H:%M:%S} UTC"
        + (
            f"; the app's transactions: {folder}/app.* (kept after the last repeat)"
            if pgbench
            else ""
        )
    )
    run.join()
    # the process that ran it ends: about a second of a core tearing down Dagster's and
    # batch_pipeline's modules, on the database's cores here (a Dagster host's in production),
    # which the app feels whatever its priority (bench/cpu_share.py): a window of its own
    exited = time.time()
    time.sleep(args.after)
    host.mark("end")
    errors = stopped(pgbench, host, sampler)
    if sampler:
        print(
            f"  app waits, quiet:      {sampler.shares(pgbench_started + WARM_UP_S, run_started)}"
        )
        print(f"  app waits, during run: {sampler.shares(run_started, run_ended)}")
        print(f"  app waits, after run:  {sampler.shares(exited, exited + args.after)}")
    rows = latencies(folder)
    if not rows and pgbench is not None:
        raise SystemExit(f"pgbench logged no transaction: {errors.strip()}")
    quiet = [ms for ended, ms in rows if pgbench_started + WARM_UP_S <= ended < run_started]
    during_rows = [(ended, ms) for ended, ms in rows if run_started <= ended <= run_ended]
    during = [ms for _, ms in during_rows]
    if sampler and quiet:
        slow_after = 2 * percentile(quiet, 0.99)
        slow = [(ended, ms) for ended, ms in during_rows if ms > slow_after]
        print(
            f"  {len(slow)} app transactions over {slow_after:.1f} ms (2x quiet p99) during the "
            f"run; the run's sessions were meanwhile doing:\n      "
            + sampler.overlapped(slow, run_started, run_ended)
        )
    exiting = [ms for ended, ms in rows if run_ended < ended <= exited]
    after = [ms for ended, ms in rows if exited < ended]
    server.drop(copy)
    by_step = {
        name: [ms for ended, ms in rows if start <= ended <= end] for name, start, end in steps
    }
    by_step[f"its process ending ({exited - run_ended:.1f} s)"] = exiting
    return quiet, during, after, (success, elapsed, changed, wal_mb, host), by_step


def stopped(pgbench, host, sampler) -> str:
    """The app's pgbench and the meters stopped at a repeat's end; pgbench's errors, if any."""
    host.stop()
    errors = ""
    if pgbench is not None:
        pgbench.terminate()  # its logs end with the line it was writing: latencies() drops it
        _, errors = pgbench.communicate(timeout=60)
    if sampler:
        sampler.stop.set()
        sampler.join()
    return errors


def given_up(run, pgbench, host, sampler) -> None:
    """A repeat whose run outlived the budget: its process stopped, then the app and the meters."""
    run.terminate()
    run.join()
    stopped(pgbench, host, sampler)


def seed_template(server: Server, template: str, scale: Scale, args) -> None:
    server.create(template)
    with server.connect(template) as conn:
        seed(conn, scale, datetime.now(UTC))
    if not args.without_indexes:
        engine = create_san_engine(db_url(args.server_url, template))
        create_recommended_indexes(engine)
        engine.dispose()
    with server.connect(template) as conn:
        conn.execute("VACUUM ANALYZE")


def app_parser(prog: str, doc: str, rate: float) -> argparse.ArgumentParser:
    """The options of a benchmark where pgbench plays the app beside a run."""
    parser = bench_parser(prog, doc)
    parser.add_argument("--server-url", default=DEFAULT_SERVER_URL)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument(
        "--rate", type=float, default=rate, help="app transactions per second (0: no app, idle)"
    )
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument(
        "--run-pgoptions",
        default="",
        help="server settings for the run's sessions only (libpq's PGOPTIONS), e.g. "
        "'-c synchronous_commit=off'",
    )
    parser.add_argument(
        "--autovacuum",
        choices=(AS_SET, "on"),
        default=AS_SET,
        help="'on' switches a server's autovacuum on for the bench (ALTER SYSTEM, put back after;"
        " superuser): a test server may keep it off, which no production database does",
    )
    return parser


def template_options(parser: argparse.ArgumentParser) -> None:
    """The options of a benchmark that plays the app on a copy of this one's template."""
    parser.add_argument("--prefix", default=PREFIX, help="bench.app_latency's, for its template")
    parser.add_argument("--without-indexes", action="store_true")
    parser.add_argument(
        "--keep-template", action="store_true", help="keep a template this call had to seed"
    )


def given_back(server: Server, template: str, seeded_here: bool, args, copy: str) -> None:
    """A borrowed template's copy dropped, and the template too if this call seeded it and was
    not told to keep it (`borrowed_template`)."""
    server.drop(copy)
    if seeded_here and not args.keep_template:
        server.drop(template)


def borrowed_template(args, scale: Scale, folder_prefix: str) -> tuple[Server, str, bool, Path]:
    """This benchmark's template, seeded now if there is none (`template_options`): the server,
    the template, whether it was seeded here, and the app's script for its scale."""
    server = Server(args.server_url, args.prefix)
    template = f"{args.prefix}_template"
    seeded_here = not server.exists(template)
    if seeded_here:
        seed_template(server, template, scale, args)
    script = Path(tempfile.mkdtemp(prefix=folder_prefix)) / "san_app.sql"
    script.write_text(APP_SCRIPT.format(scraps=scale.scraps, users=scale.users))
    return server, template, seeded_here, script


def share_of_peak(text: str) -> float:
    """`--rate-of-peak`: a share of the app's peak, over 0 and at most 1."""
    share = float(text)
    if not 0 < share <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not a share of the peak: over 0, at most 1")
    return share


def main(argv=None) -> int:
    parser = app_parser("python -m bench.app_latency", __doc__, rate=150.0)
    parser.add_argument(
        "--quiet",
        type=float,
        default=QUIET_S,
        help="seconds of app traffic alone (default: %(default)s)",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--after",
        type=float,
        default=AFTER_S,
        help="seconds of app traffic measured after the run (default: %(default)s)",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=RUN_BUDGET_S,
        help="seconds a run may take before the repeat is given up (default: %(default)s)",
    )
    parser.add_argument("--without-indexes", action="store_true")
    parser.add_argument(
        "--prefix", default=PREFIX, help="of the scratch databases (default: %(default)s)"
    )
    parser.add_argument(
        "--parallel-workers",
        type=int,
        default=None,
        help="replay the detection queries with this many parallel workers each",
    )
    parser.add_argument(
        "--run-config",
        default="{}",
        help="recovery_job run config fields as JSON, e.g. '{\"batch_size\": 1000}'",
    )
    parser.add_argument(
        "--hosts-apart",
        action="store_true",
        help="pgbench (the app's servers) at nice -10 and the run's process at the lowest "
        "priority (run_last), as if each were on a host of its own: what is left is the "
        "database's share (needs root)",
    )
    parser.add_argument(
        "--keep-template",
        action="store_true",
        help="keep the seeded template for the next call with this flag, and use one kept by "
        "an earlier call (same --scale, --prefix and index choice: not checked)",
    )
    parser.add_argument(
        "--peak-seconds",
        type=float,
        default=PEAK_S,
        help="seconds of pgbench with no rate set, before the repeats: the app's peak here, "
        "which the header reads --rate against (0: not measured; default: %(default)s)",
    )
    parser.add_argument(
        "--rate-of-peak",
        type=share_of_peak,
        default=None,
        help="play the app at this share of its peak measured here (e.g. 0.8), instead of "
        "--rate; needs --peak-seconds over 0",
    )
    parser.add_argument(
        "--sample-waits",
        action="store_true",
        help="sample what the app's backends wait on (pg_stat_activity) in each window",
    )
    args = parser.parse_args(argv)
    if args.rate_of_peak and args.peak_seconds <= 0:
        parser.error("--rate-of-peak needs the peak measured: --peak-seconds over 0")
    server = Server(args.server_url, args.prefix)
    # stopped (SIGTERM), it drops its databases and its run's process goes with it
    with server.autovacuum(args.autovacuum), terminated_as_exit():
        return measured(args, server)


def measured(args, server: Server) -> int:
    """Every repeat on a fresh copy of the template, and the figures of them all."""
    template = f"{args.prefix}_template"
    scale = Scale(args.scale)
    started = time.perf_counter()
    if not (args.keep_template and server.exists(template)):
        seed_template(server, template, scale, args)
    seeded_in = time.perf_counter() - started
    script = Path(tempfile.mkdtemp(prefix="app_latency_")) / "san_app.sql"
    script.write_text(APP_SCRIPT.format(scraps=scale.scraps, users=scale.users))
    peak = None
    if (args.rate > 0 or args.rate_of_peak) and args.peak_seconds > 0:
        peak = peak_rate(server, template, args, script, args.peak_seconds)
        if args.rate_of_peak:
            args.rate = round(args.rate_of_peak * peak)
    print(
        f"# app latency while healing: scale {args.scale} ({scale.scraps:,} scraps), "
        f"{'without' if args.without_indexes else 'with'} the recommended indexes, "
        f"pgbench {args.clients} clients at {args.rate:g} tx/s, parallel workers per detection "
        f"query: {'as the code sets' if args.parallel_workers is None else args.parallel_workers}"
        f", run config {recovery_config(args)}"
        + (", pgbench and the run as if on hosts of their own" if args.hosts_apart else "")
        + f"; seeded in {seeded_in:.0f} s"
    )
    print(server.settings_line())
    if peak is not None:
        print(
            f"# the app alone peaks at {peak:,.0f} tx/s here (pgbench {args.clients} clients, no "
            f"rate set, {args.peak_seconds:g} s on a fresh copy): --rate {args.rate:g} is "
            f"{args.rate / peak:.0%} of it"
            + (f" (--rate-of-peak {args.rate_of_peak:g})" if args.rate_of_peak else "")
        )
    all_quiet, all_during, all_after, noisy, run_seconds = [], [], [], [], []
    given_up_repeats: list[int] = []
    try:
        for repeat in range(1, args.repeats + 1):
            figures = one_repeat(server, template, args, script, script.parent)
            if figures is None:
                print(f"repeat {repeat}: GIVEN UP, the run outlived --budget {args.budget:g} s")
                given_up_repeats.append(repeat)
                continue
            quiet, during, after, (success, elapsed, changed, wal_mb, host), by_step = figures
            all_quiet += quiet
            all_during += during
            all_after += after
            run_seconds.append(elapsed)
            print(
                f"repeat {repeat}: recovery_job {'success' if success else 'FAILED'} in "
                f"{elapsed:.1f} s, {changed:,} targets healed (enqueued), {wal_mb:,.0f} MB of WAL "
                "written meanwhile"
            )
            print(f"  quiet       {summary(quiet)}  {host.describe('quiet', 'during')}")
            print(f"  during run  {summary(during)}  {host.describe('during', 'after')}")
            if quiet and during:
                ratio = percentile(during, 0.99) / percentile(quiet, 0.99)
                print(f"  this repeat's p99 during the run / quiet: {ratio:.2f}")
            if host.spoiled_the_quiet_window() or host.steal("during", "after") > NOISY_STEAL:
                noisy.append(repeat)
            for name, values in by_step.items():
                print(f"    {name:28s} {summary(values)}")
            print(f"  {args.after:.0f} s after {summary(after)}  {host.describe('after', 'end')}")
    finally:
        server.drop(f"{args.prefix}_run")
        if not args.keep_template:
            server.drop(template)
    if noisy:
        print(
            f"# repeats {', '.join(map(str, noisy))}: over {NOISY_STEAL:.0%} of the CPU time stolen"
            f" by the host in a window, or a synced write over {STALLED_FSYNC_MS:.0f} ms in the"
            " quiet one: those figures measure the host as much as the run"
        )
    if given_up_repeats:
        print(f"# repeats {', '.join(map(str, given_up_repeats))}: given up (not in the figures)")
    if not all_quiet:  # `--rate 0`: the runs' seconds are the figures (or every repeat given up)
        if args.rate == 0:
            print(f"idle: run_seconds={','.join(f'{seconds:.1f}' for seconds in run_seconds)}")
        return 0
    print(f"all repeats: quiet      {summary(all_quiet)}")
    print(f"all repeats: during run {summary(all_during)}")
    print(f"all repeats: after run  {summary(all_after)}")
    quiet_p99, during_p99 = percentile(all_quiet, 0.99), percentile(all_during, 0.99)
    after_p99 = percentile(all_after, 0.99)
    print(
        f"quiet_p99_ms={quiet_p99:.2f} during_p99_ms={during_p99:.2f} "
        f"ratio={during_p99 / quiet_p99:.2f} after_p99_ms={after_p99:.2f} "
        f"after_ratio={after_p99 / quiet_p99:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
