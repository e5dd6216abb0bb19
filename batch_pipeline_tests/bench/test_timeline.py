"""bench/timeline.py: the app's latency window by window beside the server's checkpoints and
autovacuums, on a pgbench log and a server log written here."""

from datetime import UTC, datetime

import pytest

from bench.timeline import main, server_events

DAY = "2026-12-07"
SERVER_LOG = f"""\
{DAY} 10:00:30.000 UTC [11] LOG:  checkpoint starting: wal
{DAY} 10:00:45.500 UTC [12] LOG:  automatic vacuum of table "san_run.public.jobs": index scans: 1
\tpages: 0 removed, 100 remain, 100 scanned (100.00% of total)
\tsystem usage: CPU: user: 1.10 s, system: 0.20 s, elapsed: 20.50 s
{DAY} 10:01:10.000 UTC [11] LOG:  checkpoint complete: wrote 815 buffers (5.0%); total=40.0 s
{DAY} 10:02:05.000 UTC [13] batch_pipeline postgres@san LOG:  duration: 300.1 ms  statement: x
{DAY} 10:02:30.000 UTC [14] LOG:  automatic analyze of table "san_run.public.scraps"
\tsystem usage: CPU: user: 0.10 s, system: 0.00 s, elapsed: 0.40 s
"""


def at(clock: str) -> float:
    return datetime.fromisoformat(f"{DAY} {clock}").replace(tzinfo=UTC).timestamp()


def pgbench_log(folder, transactions) -> None:
    """pgbench's per-transaction log: client, transaction, latency µs, script, epoch s, µs."""
    lines = []
    for number, (clock, ms) in enumerate(transactions):
        ended = at(clock)
        lines.append(f"0 {number} {int(ms * 1000)} 0 {int(ended)} {int(ended % 1 * 1e6)}")
    (folder / "app.1").write_text("\n".join(lines) + "\n")


def test_the_server_s_checkpoints_and_autovacuums_are_read_with_their_spans():
    events = server_events(SERVER_LOG.splitlines())
    spans = [(e.what, e.start, e.end) for e in events]
    assert spans == [
        ("autovacuum jobs", at("10:00:25"), at("10:00:45.5")),  # its end less its elapsed
        ("checkpoint", at("10:00:30"), at("10:01:10")),
        ("autoanalyze scraps", at("10:02:29.6"), at("10:02:30")),
    ]


def test_each_minute_holds_its_transactions_marks_and_the_events_overlapping_it(tmp_path, capsys):
    slow_minute = [(f"10:00:{second:02d}", 100.0 if second == 50 else 4.0) for second in range(60)]
    quiet_minute = [(f"10:01:{second:02d}", 4.0) for second in range(0, 60, 2)]
    pgbench_log(tmp_path, [*slow_minute, *quiet_minute, ("10:02:40", 6.0)])
    log = tmp_path / "postgresql.log"
    log.write_text(SERVER_LOG)
    argv = [str(tmp_path), "--server-log", str(log), "--mark", "10:01:15=run"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    # each window in app_latency's own figures (`summary`)
    assert lines == [
        "10:00:00     60 tx  p50   4.00 ms  p99 100.00 ms  max  100.00 ms  autovacuum jobs, "
        "checkpoint",
        "10:01:00     30 tx  p50   4.00 ms  p99   4.00 ms  max    4.00 ms  [run]  checkpoint",
        "10:02:00      1 tx  p50   6.00 ms  p99   6.00 ms  max    6.00 ms  autoanalyze scraps",
    ]


@pytest.mark.parametrize(
    "argv, error",
    [
        (["--mark", "10:01=run"], "--mark '10:01=run': expected HH:MM:SS=label"),
        (["--mark", "10:01:15"], "expected HH:MM:SS=label"),
    ],
)
def test_a_mark_not_in_the_form_it_takes_is_refused(tmp_path, argv, error):
    pgbench_log(tmp_path, [("10:00:01", 4.0)])
    log = tmp_path / "postgresql.log"
    log.write_text(SERVER_LOG)
    with pytest.raises(SystemExit, match=error):
        main([str(tmp_path), "--server-log", str(log), *argv])


def test_a_server_log_not_in_utc_and_a_folder_without_logs_are_refused(tmp_path):
    log = tmp_path / "postgresql.log"
    log.write_text(f"{DAY} 10:00:30.000 CET [11] LOG:  checkpoint starting: wal\n")
    pgbench_log(tmp_path, [("10:00:01", 4.0)])
    with pytest.raises(SystemExit, match="the server's log is in CET: set log_timezone = 'UTC'"):
        main([str(tmp_path), "--server-log", str(log)])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SystemExit, match="no pgbench transaction logged in"):
        main([str(empty), "--server-log", str(log)])
