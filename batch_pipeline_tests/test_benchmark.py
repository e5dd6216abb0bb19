"""The benchmark at scale 0.01, so it cannot rot: it runs end to end on the real PostgreSQL and
the pipeline changes exactly the rows the raw-SQL baseline changes. No timing is asserted."""

import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from batch_pipeline.recovery.registry import AREAS, RECOVERIES
from batch_pipeline.recovery.targets import TargetRecovery
from batch_pipeline_tests.conftest import pg_admin_url
from batch_pipeline_tests.processes import ROOT
from bench import app_latency, baseline, chunk_cost, cpu_share, step_load, timeline
from bench.runner import SET_BY_ALTER_SYSTEM, Server, psycopg_conninfo, run_benchmark

pytestmark = pytest.mark.system  # runs the benchmark scripts end to end


def test_the_baseline_has_one_statement_per_recovery_of_the_registry():
    assert list(baseline.RECOVERY_SQL) == list(AREAS)


def test_benchmark_runs_and_pipeline_matches_the_baseline():
    lines = []
    figures = run_benchmark(
        0.01, pg_admin_url(), repeats=1, out=lines.append, prefix=f"bp_bench_{uuid.uuid4().hex[:8]}"
    )
    for area in AREAS:
        assert figures.rows[f"pipeline {area}"] == figures.rows[f"baseline {area}"] > 0
    assert figures.rows["pipeline til jobs"] == figures.rows["baseline til jobs"] > 0
    # at this toy scale the fixed overhead can exceed a run, so a ratio may be negative
    assert re.fullmatch(
        r"ratio recovery=-?\d+\.\d\d til=-?\d+\.\d\d overhead_s=\d+\.\d rss_mb=\d+ "
        r"probe_ms=\d+\.\d",
        figures.summary_line(),
    )
    text = "\n".join(lines)
    assert "Index Only Scan jobs(ix_san_jobs_target)" in text  # plans are reported with the indexes
    # the unknown-status check, run in every recovery run, reads its partial index (an index or
    # a bitmap scan), never every job
    with_indexes = lines[
        next(i for i, line in enumerate(lines) if "## with the recommended indexes" in line) :
    ]
    [unknown] = [line for line in with_indexes if "unknown_job_statuses check" in line]
    assert "(ix_san_jobs_unknown_status)" in unknown and "Seq Scan" not in unknown, unknown
    assert "Seq Scan" in text  # and without them


def test_only_indexed_skips_the_no_index_template_and_its_runs():
    lines = []
    prefix = f"bp_bench_{uuid.uuid4().hex[:8]}"
    figures = run_benchmark(
        0.01, pg_admin_url(), repeats=1, out=lines.append, prefix=prefix, only_indexed=True
    )
    assert (
        figures.rows["pipeline ghost_job_recovery"]
        == figures.rows["baseline ghost_job_recovery"]
        > 0
    )
    assert {mode for mode, _ in figures.times} == {"idx"}
    text = "\n".join(lines)
    assert "without the recommended indexes" not in text and "with the recommended indexes" in text
    # the write batches' plans too: per-target index probes, never a scan of a whole table
    write_plans = {
        line.split("write batch")[0].strip(): line for line in lines if "write batch" in line
    }
    assert set(write_plans) == {recovery.name for recovery in RECOVERIES}
    # the unrefined and unwritten-TIL re-checks read their partial index by id, not the rows
    # themselves
    assert (
        "Index Only Scan scraps(ix_san_scraps_unrefined_by_id)" in write_plans["unrefined_scraps"]
    )
    assert (
        "Index Only Scan daily_summaries(ix_san_daily_summaries_unwritten_by_id)"
        in write_plans["unwritten_tils"]
    )
    assert "Seq Scan" not in "".join(write_plans.values())


def test_probe_only_prints_the_fast_lane_probe_and_its_plans():
    lines = []
    figures = run_benchmark(
        0.01,
        pg_admin_url(),
        repeats=1,
        out=lines.append,
        prefix=f"bp_bench_{uuid.uuid4().hex[:8]}",
        probe_only=True,
    )
    assert figures.summary_line() == f"probe_ms={figures.probe_ms:.1f}" and figures.probe_ms > 0
    assert not figures.times  # no pipeline runs
    probe_lines = [line for line in lines if "lane:" in line]
    probe_plans = [line for line in probe_lines if "(median of" not in line]
    # the claim-latency sample, unclaimed jobs + (failures, failed, never enqueued) per recovery
    assert len(probe_plans) == 11, probe_plans
    # and each one's time
    assert len(probe_lines) - len(probe_plans) == 11, probe_lines
    [sample] = [line for line in probe_plans if "claim-latency sample" in line]
    assert "Seq Scan" not in sample, sample  # a primary-key range
    [unclaimed] = [line for line in probe_plans if "unclaimed PENDING jobs" in line]
    assert "ix_san_jobs_active_covering" in unclaimed and "Seq Scan" not in unclaimed, unclaimed
    failed = [line for line in probe_plans if " recent failures " in line]
    assert all("ix_san_jobs_failed_updated" in line for line in failed), failed
    assert len([line for line in lines if "fast lane tick (" in line]) == 1


def test_the_app_guarantee_benchmark_runs_and_builds_the_index_it_measures():
    from bench.app_guarantee import run

    lines = []
    figures = run(pg_admin_url(), jobs=20_000, out=lines.append, writes=50, batch=200)
    assert set(figures) == {"without", "with", "build"} and figures["build"]["mb"] > 0
    assert set(figures["with"]) == {
        "app insert ms",
        "worker claim ms",
        "worker complete ms",
        "recovery batch ms",
    }
    assert any(
        line.startswith("CREATE UNIQUE INDEX CONCURRENTLY ux_san_jobs_one_active") for line in lines
    )


def test_the_lock_contention_benchmark_runs_every_writer_at_once_and_all_succeed():
    from bench.lock_contention import run

    lines = []
    rows = run(pg_admin_url(), scale=0.01, days=2, old=False, out=lines.append, start_delay_s=8)
    assert sorted(job for job, *_ in rows) == [
        "recovery_job",
        "til_auto_generation_job",
        "til_auto_generation_job",
    ]
    assert all(success for _job, _key, success, *_ in rows), lines


def test_the_explain_benchmark_indexes_a_history_and_tells_the_whole_story():
    from bench.explain import run

    lines = []
    figures = run(pg_admin_url(), days=1, scale=0.001, repeats=2, command_runs=1, out=lines.append)
    assert figures["events"] > 2 * 24 * 60  # a day of lane runs and rounds, and recovery runs
    story = {(asset, action): times for asset, action, times in figures["story"]}
    assert story[("fast_lane_retries", "retried by the fast lane")] == 1  # each its own line
    assert story[("orphan_scrap_recovery", "listed as exhausted")] > 1  # one streak
    assert ("redrive", "redriven") in story
    assert len([a for a, action, _ in figures["story"] if action == "announced again"]) == 2
    assert all(figures[label][0] > 0 for label in ("whole_story", "through_a_job", "untouched"))
    assert any(line.startswith("python -m batch_pipeline explain scrap 7") for line in lines)


def databases_named(prefix: str) -> list:
    """The server's databases whose name starts with `prefix` (a bench's, left behind)."""
    with psycopg.connect(**psycopg_conninfo(pg_admin_url()), autocommit=True) as conn:
        return conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s", (f"{prefix}%",)
        ).fetchall()


def test_the_app_latency_benchmark_runs_and_counts_every_window(capsys, tmp_path):
    """bench/app_latency.py at a toy scale with real pgbench: the quiet, during and after
    windows hold transactions (the run's process ending is a window of its own), the run
    succeeded, its WAL and the app's waits are printed (no latency is asserted)."""
    if shutil.which("pgbench") is None:
        pytest.fail("pgbench is missing: it comes with PostgreSQL's client package")
    assert (
        app_latency.main(
            [
                "--scale",
                "0.001",
                "--repeats",
                "1",
                "--quiet",
                "7",
                "--after",
                "3",
                "--sample-waits",
                "--peak-seconds",
                "2",
                "--server-url",
                pg_admin_url(),
                "--prefix",
                f"bp_latency_{uuid.uuid4().hex[:8]}",
            ]
        )  # fmt: skip
        == 0
    )
    out = capsys.readouterr().out
    assert re.search(r"recovery_job success in .* targets healed \(enqueued\), \d+ MB of WAL", out)
    with psycopg.connect(**psycopg_conninfo(pg_admin_url()), autocommit=True) as conn:
        autovacuum = conn.execute("SHOW autovacuum").fetchone()[0]
    settings = re.search(r"^# server: autovacuum (\w+), shared_buffers \w+, .*$", out, re.M)
    assert settings and settings[1] == autovacuum, out
    assert ("never vacuumed" in settings[0]) == (autovacuum == "off"), settings[0]
    # what --rate (150) is read against: pgbench with no rate set on a copy, dropped after
    peak = re.search(
        r"^# the app alone peaks at ([\d,]+) tx/s here .*: --rate 150 is \d+% of it$", out, re.M
    )
    assert peak and int(peak[1].replace(",", "")) > 0, out
    quiet, during, after = re.findall(r"^  (?:quiet|during run|3 s after) +(\d+) tx", out, re.M)
    assert int(quiet) > 0 and int(during) > 0 and int(after) > 0, out
    # the run's process ending is a window of its own, out of both the run's and the after one
    assert re.search(r"^    its process ending \(\d+\.\d s\) +\d+ tx", out, re.M), out
    # the run's instants and the app's logs, which bench.timeline reads minute by minute
    kept = re.search(
        r"^  run from \d\d:\d\d:\d\d to \d\d:\d\d:\d\d UTC; the app's transactions: (\S+)/app\.\* ",
        out,
        re.M,
    )
    assert kept, out
    server_log = tmp_path / "postgresql.log"
    server_log.write_text("")
    assert timeline.main([kept[1], "--server-log", str(server_log), "--every", "1"]) == 0
    seconds = re.findall(r"^\d\d:\d\d:\d\d +(\d+) tx", capsys.readouterr().out, re.M)
    assert sum(map(int, seconds)) >= int(quiet) + int(during) + int(after), seconds
    assert re.search(r"^  app waits, quiet: .*samples", out, re.M), out
    for window in ("quiet", "during run", "3 s after"):
        assert re.search(
            rf"^  {window} .* steal +\d+%  disk +\d+\.\d\d ms per write, "
            r"slowest fsync +\d+\.\d ms$",
            out,
            re.M,
        ), out
    assert re.search(
        r"app transactions over \d+\.\d ms \(2x quiet p99\) during the run; the run's sessions",
        out,
    ), out
    assert re.search(
        r"^quiet_p99_ms=\d+\.\d\d during_p99_ms=\d+\.\d\d ratio=\d+\.\d\d "
        r"after_p99_ms=\d+\.\d\d after_ratio=\d+\.\d\d$",
        out,
        re.M,
    )


def test_the_app_latency_benchmark_plays_the_app_at_a_share_of_its_measured_peak(capsys):
    """`--rate-of-peak`: the app plays at that share of the peak the bench measured, and the
    header says which rate that was."""
    argv = ["--scale", "0.001", "--repeats", "1", "--quiet", "6", "--after", "1"]
    prefix = f"bp_latency_{uuid.uuid4().hex[:8]}"
    argv += ["--peak-seconds", "2", "--rate-of-peak", "0.5", "--prefix", prefix]
    assert app_latency.main([*argv, "--server-url", pg_admin_url()]) == 0
    out = capsys.readouterr().out
    peak = re.search(
        r"^# the app alone peaks at ([\d,]+) tx/s here .*: --rate (\d+) is 50% of it "
        r"\(--rate-of-peak 0\.5\)$",
        out,
        re.M,
    )
    assert peak, out
    rate = int(peak[2])  # half the peak, which the header prints rounded to a transaction
    assert rate > 0 and abs(rate - 0.5 * int(peak[1].replace(",", ""))) <= 1, out
    assert re.search(
        rf"^# app latency while healing: .*, pgbench 4 clients at {rate} tx/s,", out, re.M
    ), out
    assert not databases_named(prefix)


@pytest.mark.parametrize(
    "argv, error",
    [
        (["--rate-of-peak", "1.5"], "1.5 is not a share of the peak: over 0, at most 1"),
        (["--rate-of-peak", "0"], "0 is not a share of the peak"),
        (["--rate-of-peak", "0.8", "--peak-seconds", "0"], "--rate-of-peak needs the peak"),
    ],
)
def test_a_rate_of_peak_that_is_no_share_or_has_no_peak_is_refused(capsys, argv, error):
    with pytest.raises(SystemExit) as exit_:
        app_latency.main(argv)
    assert exit_.value.code == 2
    assert error in capsys.readouterr().err


def test_a_repeat_whose_run_outlives_the_budget_is_given_up_and_the_next_one_runs(capsys):
    """`--budget` shorter than any run: each repeat is given up (its run process stopped, its
    copy dropped), called out and left out of the figures; the bench still ends well."""
    argv = ["--scale", "0.001", "--rate", "0", "--repeats", "2", "--quiet", "1", "--after", "0"]
    prefix = f"bp_latency_{uuid.uuid4().hex[:8]}"
    budget = ["--budget", "0.001"]
    assert (
        app_latency.main([*argv, *budget, "--server-url", pg_admin_url(), "--prefix", prefix]) == 0
    )
    out = capsys.readouterr().out
    assert re.findall(r"^repeat (\d): GIVEN UP, the run outlived --budget 0.001 s$", out, re.M) == [
        "1",
        "2",
    ], out
    assert "# repeats 1, 2: given up (not in the figures)" in out
    assert re.search(r"^idle: run_seconds=$", out, re.M), out
    assert databases_named(prefix) == []


def test_the_app_latency_benchmark_without_an_app_times_the_run_alone(capsys):
    """`--rate 0`: no pgbench, the run on an idle database; its seconds are the figure.
    `--autovacuum on`: the bench runs with it on and leaves the server's own setting after."""
    server = Server(pg_admin_url())
    before = (server.shown("autovacuum"), alter_system_autovacuum(server))
    argv = ["--scale", "0.001", "--rate", "0", "--repeats", "1", "--quiet", "1", "--after", "0"]
    prefix = f"bp_latency_{uuid.uuid4().hex[:8]}"
    argv += ["--autovacuum", "on", "--server-url", pg_admin_url(), "--prefix", prefix]
    assert app_latency.main(argv) == 0
    out = capsys.readouterr().out
    assert re.search(r"^# server: autovacuum on, ", out, re.M), out
    assert re.search(r"recovery_job success in .* [1-9][\d,]* targets healed", out), out
    assert re.search(r"^idle: run_seconds=\d+\.\d$", out, re.M), out
    assert (server.shown("autovacuum"), alter_system_autovacuum(server)) == before


def test_the_cpu_share_benchmark_measures_the_app_beside_a_loop_and_a_process_ending(capsys):
    """bench/cpu_share.py at a toy scale: the app's peak alone and beside each busy loop, then
    the app's latency around a ranked-last process ending; its databases dropped after."""
    prefix = f"bp_share_{uuid.uuid4().hex[:8]}"
    argv = ["--scale", "0.001", "--seconds", "2", "--trials", "1"]
    assert cpu_share.main([*argv, "--server-url", pg_admin_url(), "--prefix", prefix]) == 0
    out = capsys.readouterr().out
    alone = re.search(r"^app alone, no rate set: +(\d+) tx/s$", out, re.M)
    assert alone and int(alone[1]) > 0, out
    for label in ("ranked last", "at normal priority"):
        assert re.search(rf"^beside a busy loop {label}: +\d+ tx/s \(\d+% of alone\)$", out, re.M)
    assert re.search(r"^  ending 1 \(\d+\.\d s\):$", out, re.M), out
    for window in ("10 s before", "while it ends", "3 s after"):
        assert re.search(rf"^    {window} +\d+ tx  p50", out, re.M), out
    assert databases_named(prefix) == []


def alter_system_autovacuum(server: Server) -> tuple | None:
    """What postgresql.auto.conf (ALTER SYSTEM's file) holds for autovacuum."""
    return server.conn.execute(SET_BY_ALTER_SYSTEM, ("autovacuum",)).fetchone()


def test_a_bench_s_autovacuum_puts_back_what_alter_system_held_even_when_it_fails():
    """A server whose autovacuum is off by ALTER SYSTEM: on inside the block, and that setting
    back after it, though the block raised."""
    server = Server(pg_admin_url())
    held = alter_system_autovacuum(server)
    try:
        server._alter_system("autovacuum", "off")
        with pytest.raises(RuntimeError, match="the bench failed"):
            with server.autovacuum("on"):
                assert server.shown("autovacuum") == "on"
                raise RuntimeError("the bench failed")
        assert server.shown("autovacuum") == "off"
        assert alter_system_autovacuum(server) == ("off",)
    finally:
        server._alter_system("autovacuum", held[0] if held else None)


TERMINATED_INSIDE = """
import sys, time
from bench.runner import Server
with Server(sys.argv[1]).autovacuum("on"):
    print("inside", flush=True)
    time.sleep(120)
"""


def test_a_bench_s_autovacuum_puts_back_what_alter_system_held_when_it_is_killed():
    """`kill` (SIGTERM) of a bench inside the block: the process exits 143 and the server's
    autovacuum is off again, as ALTER SYSTEM held it; Python's default would leave it on."""
    server = Server(pg_admin_url())
    held = alter_system_autovacuum(server)
    try:
        server._alter_system("autovacuum", "off")
        bench = subprocess.Popen(
            [sys.executable, "-c", TERMINATED_INSIDE, pg_admin_url()],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        try:
            assert bench.stdout.readline() == "inside\n"
            assert server.shown("autovacuum") == "on"
            bench.terminate()
            assert bench.wait(timeout=60) == 143
        finally:
            bench.kill()
        assert server.shown("autovacuum") == "off"
        assert alter_system_autovacuum(server) == ("off",)
    finally:
        server._alter_system("autovacuum", held[0] if held else None)


def test_a_stopped_app_latency_bench_stops_its_run_s_process_and_drops_its_databases():
    """`kill` (SIGTERM) of bench.app_latency while the app plays its quiet window: it exits 143
    at once, the run's process (spawned, waiting for its start) is gone with it, and so are
    the bench's databases. A process the bench waited for would keep it alive for a whole run."""
    prefix = f"bp_latency_{uuid.uuid4().hex[:8]}"
    argv = ["--scale", "0.001", "--quiet", "300", "--peak-seconds", "0", "--prefix", prefix]
    bench = subprocess.Popen(
        [sys.executable, "-m", "bench.app_latency", *argv, "--server-url", pg_admin_url()],
        stdout=subprocess.DEVNULL,
        cwd=ROOT,
    )
    try:
        with psycopg.connect(**psycopg_conninfo(pg_admin_url()), autocommit=True) as conn:
            playing = "SELECT 1 FROM pg_stat_activity WHERE datname = %s AND application_name = %s"
            while not conn.execute(playing, (f"{prefix}_run", "pgbench")).fetchone():
                assert bench.poll() is None, "the bench ended before its quiet window"
                time.sleep(0.2)
        children = {
            int(pid)
            for task in Path(f"/proc/{bench.pid}/task").iterdir()
            for pid in (task / "children").read_text().split()
        }
        bench.terminate()
        assert bench.wait(timeout=60) == 143
    finally:
        bench.kill()
    assert children, "the run's process was not found"
    deadline = time.monotonic() + 30  # pgbench and multiprocessing's tracker see their end
    while [pid for pid in children if Path(f"/proc/{pid}").exists()]:
        assert time.monotonic() < deadline, [
            Path(f"/proc/{pid}/cmdline").read_text() for pid in children
        ]
        time.sleep(0.2)
    assert databases_named(prefix) == []


def test_the_metrics_scrape_benchmark_times_a_reading_with_and_without_the_indexes():
    from bench import metrics_scrape

    lines = []
    prefix = f"bp_bench_{uuid.uuid4().hex[:8]}"
    figures = metrics_scrape.measure(pg_admin_url(), 0.001, out=lines.append, prefix=prefix)
    # the seed's ghosts: 1 % of scraps stuck PENDING, 0.25 % stuck PROCESSING
    assert figures["ghosts"] == 25 and figures["jobs"] > figures["scraps"]
    assert figures["with_indexes_ms"] > 0 and figures["without_indexes_ms"] > 0
    [line] = lines
    assert "25 ghosts counted" in line and "with the recommended indexes" in line


def test_the_step_benchmark_reads_the_run_s_writes_back_and_times_the_app(capsys):
    """bench/step_load.py at a toy scale: the run's jobs are read back from SAN's rows (not
    pgbench's), its time at work is sampled, the app's windows hold transactions, where the load's
    slow transactions fell is printed, and so is the same step with no run (the control), the
    verdict line is printed."""
    prefix = f"bp_step_{uuid.uuid4().hex[:8]}"
    argv = ["--scale", "0.001", "--quiet", "7", "--load-for", "7", "--step-at", "0"]
    assert step_load.main([*argv, "--server-url", pg_admin_url(), "--prefix", prefix]) == 0
    out = capsys.readouterr().out
    created = re.search(r"recovery_job success in .* s, ([\d,]+) jobs created", out)
    assert created and int(created[1].replace(",", "")) > 0, out
    alone, loaded = re.findall(r"^  app(?: alone|, first 30 s) +(\d+) tx", out, re.M)
    assert int(alone) > 0 and int(loaded) > 0, out
    # the app's own start alone, the load's p99 past its warm-up, and where its slow ones fell
    assert re.search(
        r"^  app alone, first 5 s +\d+ tx +p99 +\d+\.\d\d ms  \(left out", out, re.M
    ), out
    assert re.search(r"^  app, 5 s to 30 s +\d+ tx +p99 +\d+\.\d\d ms$", out, re.M), out
    # the control: the same step with no run, its transactions and where its slow ones fell
    control = re.search(r"^  app, first 30 s, no run +(\d+) tx +p99 +\d+\.\d\d ms", out, re.M)
    assert control and int(control[1]) > 0, out
    no_run = r"^  \.\.\. and of the same step with no run: +(none|\d+s:\d+)"
    assert re.search(no_run, out, re.M), out
    assert re.search(
        r"^  over 1.5x the quiet p99, per second of the load: (none|\d+s:\d+)", out, re.M
    ), out
    sampled = re.search(r"^  run's time at work: (\d+) samples", out, re.M)
    assert sampled and int(sampled[1]) > 0, out
    assert len(re.findall(r"^  run's time at work .* \d\.\d\d share$", out, re.M)) == 4, out
    assert re.search(
        r"^drop_after_s=(never|\d+\.\d) back_after_s=(never|\d+\.\d) "
        r"at_work_drop_after_s=(never|\d+\.\d) at_work_back_after_s=(never|\d+\.\d) "
        r"quiet_p99_ms=\d+\.\d\d load_p99_ms=\d+\.\d\d ratio=\d+\.\d\d "
        r"control_p99_ms=\d+\.\d\d control_ratio=\d+\.\d\d$",
        out,
        re.M,
    ), out


def test_the_sampler_cost_benchmark_compares_the_app_alone_and_sampled(capsys):
    """bench/sampler_cost.py at a toy scale, at the resting pace: both kinds of window hold
    transactions, one reading is timed, the verdict line is printed."""
    from bench import sampler_cost

    prefix = f"bp_sampler_{uuid.uuid4().hex[:8]}"
    argv = ["--scale", "0.001", "--window", "3", "--rounds", "1", "--rate", "50", "--every", "0.5"]
    assert sampler_cost.main([*argv, "--server-url", pg_admin_url(), "--prefix", prefix]) == 0
    out = capsys.readouterr().out
    assert "readings (every 0.5 s)" in out, out
    counts = re.findall(r"^  app (?:alone|\+ readings) +(\d+) tx", out, re.M)
    assert len(counts) == 2 and all(int(count) > 0 for count in counts), out
    assert re.search(
        r"^alone_p99_ms=\d+\.\d\d sampled_p99_ms=\d+\.\d\d ratio=\d+\.\d\d reading_ms=\d+\.\d\d$",
        out,
        re.M,
    ), out


def test_the_chunk_cost_benchmark_times_each_sweep_s_chunk_and_its_share_on_the_server(capsys):
    """bench/chunk_cost.py at a toy scale: a line per target recovery's sweep, and the
    machine-readable figures, each a time measured (no speed is asserted)."""
    prefix = f"bp_chunks_{uuid.uuid4().hex[:8]}"
    argv = ["--scale", "0.001", "--chunks", "3", "--ids", "100"]
    assert chunk_cost.main([*argv, "--server-url", pg_admin_url(), "--prefix", prefix]) == 0
    out = capsys.readouterr().out
    names = [r.name for r in RECOVERIES if isinstance(r, TargetRecovery)]
    kinds = ("chunk_ms", "sampled_chunk_ms", "plan_ms", "execute_ms")
    for name in names:
        assert re.search(
            rf"^  {name} +chunk +\d+\.\d\d ms from the code, +\d+\.\d\d ms beside the readings; "
            r"server: planning +\d+\.\d\d ms, execution +\d+\.\d\d ms$",
            out,
            re.M,
        ), out
    figures = dict(pair.split("=") for pair in out.strip().splitlines()[-1].split())
    wanted = {f"{name}_{kind}" for name in names for kind in kinds}
    assert set(figures) == wanted | {"build_ms"}, figures
    timed_here = [v for name, v in figures.items() if name.endswith(("chunk_ms", "build_ms"))]
    assert all(float(value) > 0 for value in timed_here), figures  # the server's may round to 0
    assert databases_named(prefix) == []
