"""The app's latency window by window, beside what the server did meanwhile: its checkpoints
and autovacuums, read from its log. Near the app's peak its p99 moves with them, the app alone
as much as beside a run: a minute that holds an autovacuum of `jobs` can be ten times another.

    .venv/bin/python -m bench.timeline FOLDER --server-log PATH [--every 60]
                                      [--mark HH:MM:SS=label ...]

FOLDER holds pgbench's per-transaction logs (`app.*`: bench.app_latency prints where the last
repeat's are). PATH is the PostgreSQL server's log, with `log_checkpoints` on (PostgreSQL 15's
default) and `log_autovacuum_min_duration = 0` for every autovacuum, its lines starting with
the time in UTC (`log_line_prefix` '%m ...', `log_timezone` UTC). A checkpoint lasts from its
"checkpoint starting" to its "checkpoint complete"; an autovacuum or autoanalyze from its end
less its `elapsed`. Prints, per `--every` seconds: the app's transactions, p50, p99 and max, the
marks in it (`--mark 17:54:31=run`, on the day of the first transaction) and the events that
overlap it.
"""

import re
from bisect import bisect_left
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench.app_latency import latencies, summary
from bench.runner import bench_parser

STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?) (\S+) ")
AUTOVACUUM = re.compile(r'automatic (vacuum|analyze) of table "(?:[^".]+\.)*([^".]+)"')
ELAPSED = re.compile(r"elapsed: ([\d.]+) s")


@dataclass
class Event:
    start: float
    end: float
    what: str


def instant(stamp: str) -> float:
    return datetime.fromisoformat(stamp).replace(tzinfo=UTC).timestamp()


def server_events(lines) -> list[Event]:
    """The checkpoints, autovacuums and autoanalyzes a server's log tells, by their instants."""
    events: list[Event] = []
    checkpoint_started = None
    pending: Event | None = None  # an autovacuum whose `elapsed` is on a line of its own
    for line in lines:
        stamped = STAMP.match(line)
        if stamped is None:  # a continued line: the autovacuum's figures
            elapsed = ELAPSED.search(line)
            if pending is not None and elapsed:
                pending.start = pending.end - float(elapsed[1])
                pending = None
            continue
        if stamped[2] != "UTC":
            raise SystemExit(f"the server's log is in {stamped[2]}: set log_timezone = 'UTC'")
        at = instant(stamped[1])
        if "checkpoint starting:" in line:
            checkpoint_started = at
        elif "checkpoint complete:" in line and checkpoint_started is not None:
            events.append(Event(checkpoint_started, at, "checkpoint"))
            checkpoint_started = None
        elif autovacuum := AUTOVACUUM.search(line):
            pending = Event(at, at, f"auto{autovacuum[1]} {autovacuum[2]}")
            events.append(pending)
    return events


def timeline(
    rows: list[tuple[float, float]],
    events: list[Event],
    every: float,
    marks: dict[float, str],
) -> list[str]:
    """A line per `every` seconds from the first transaction to the last."""
    lines = []
    if not rows:
        return lines
    rows = sorted(rows)
    instants = [ended for ended, _ in rows]  # sorted: each window is a slice of them
    start, last = instants[0], instants[-1]
    while start <= last:
        end = start + every
        first, past = bisect_left(instants, start), bisect_left(instants, end)
        window = [ms for _, ms in rows[first:past]]
        marked = [label for at, label in sorted(marks.items()) if start <= at < end]
        overlapping = sorted({e.what for e in events if e.start < end and e.end >= start})
        lines.append(
            f"{datetime.fromtimestamp(start, UTC):%H:%M:%S}  {summary(window)}"
            + "".join(f"  [{label}]" for label in marked)
            + ("  " + ", ".join(overlapping) if overlapping else "")
        )
        start = end
    return lines


def parsed_marks(marks: list[str], day: datetime) -> dict[float, str]:
    """`HH:MM:SS=label` on `day`, by instant."""
    found = {}
    for mark in marks:
        clock, _, label = mark.partition("=")
        if not label or not re.fullmatch(r"\d\d:\d\d:\d\d", clock):
            raise SystemExit(f"--mark {mark!r}: expected HH:MM:SS=label")
        found[instant(f"{day:%Y-%m-%d} {clock}")] = label
    return found


def main(argv=None) -> int:
    parser = bench_parser("python -m bench.timeline", __doc__)
    parser.add_argument("folder", type=Path, help="pgbench's per-transaction logs (app.*)")
    parser.add_argument("--server-log", type=Path, required=True)
    parser.add_argument("--every", type=float, default=60.0, help="seconds a line")
    parser.add_argument("--mark", action="append", default=[], help="HH:MM:SS=label (UTC)")
    args = parser.parse_args(argv)
    if args.every <= 0:
        parser.error("--every must be over 0 seconds")
    rows = latencies(args.folder)
    if not rows:
        raise SystemExit(f"no pgbench transaction logged in {args.folder} (app.*)")
    with args.server_log.open(errors="replace") as log:
        events = server_events(log)
    day = datetime.fromtimestamp(min(rows)[0], UTC)
    for line in timeline(rows, events, args.every, parsed_marks(args.mark, day)):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
