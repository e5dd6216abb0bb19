"""Whether a process beside the database takes from it whatever its priority: what
bench.app_latency's figures mean on a machine where the run's process shares the database's
cores (its `--hosts-apart` ranks that process last, as if on a host of its own).

On a copy of bench.app_latency's template (seeded if there is none), pgbench plays the app with
no rate set for `--seconds` each: alone, beside a busy loop ranked last (`run_last`: a session
of its own, SCHED_IDLE, nice 19), beside one at normal priority. Where the kernel can give the
database's processes every core they want, the first two match. Where they don't (a virtual
machine whose host caps its CPU time: a loop that runs while the database waits on a disk
spends time the database would have had), no priority protects the database, and a run's
process on its host costs the app whatever that process spends.

Then the app at `--share` of its peak, and `--trials` times a process that has imported
batch_pipeline (as a run worker has) ends, ranked last, doing nothing else: the app's latency
in the 10 s before, while it ends, and in the 3 s after. A Python process holding Dagster's and
batch_pipeline's modules takes about a second of a core to end.

    .venv/bin/python -m bench.cpu_share [--scale 1] [--seconds 20] [--share 0.75] [--trials 3]
"""

import multiprocessing
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.app_latency import (
    app_parser,
    borrowed_template,
    given_back,
    latencies,
    pgbench_command,
    run_last,
    settle_the_disk,
    summary,
    template_options,
    unthrottled_tps,
)
from bench.runner import db_url, psycopg_conninfo
from bench.seed import Scale

BUSY_LOOP = [sys.executable, "-c", "while True: pass"]
BEFORE_S, AFTER_S = 10.0, 3.0
TRIAL_EVERY_S = 17.0  # a trial's ending and its app's backlog are over well within this


def peak(args, script: Path, conninfo: dict, database: str, beside: list | None, last: bool):
    """pgbench's tx/s with no rate set for `--seconds`, beside `beside` (a command, run at the
    lowest priority if `last`) or alone."""
    loop = subprocess.Popen(beside, preexec_fn=run_last if last else None) if beside else None
    try:
        return unthrottled_tps(args, script, conninfo, database, args.seconds)
    finally:
        if loop:
            loop.kill()
            loop.wait()


def imported_then_ended(ready, go) -> None:
    """A run worker's imports, ranked last, then nothing but ending when `go` is set."""
    run_last()
    import batch_pipeline.definitions  # noqa: F401

    ready.set()
    go.wait()


def endings(args, script: Path, conninfo: dict, database: str) -> list[str]:
    """The app at `args.rate` while `--trials` processes end, one every TRIAL_EVERY_S: a line
    each."""
    context = multiprocessing.get_context("spawn")
    waiting = []
    for _ in range(args.trials):  # imported before the app starts: only their ending is timed
        ready, go = context.Event(), context.Event()
        process = context.Process(target=imported_then_ended, args=(ready, go))
        process.start()
        ready.wait(timeout=120)
        waiting.append((process, go))
    folder = Path(tempfile.mkdtemp(prefix="cpu_share_"))
    seconds = BEFORE_S + args.trials * TRIAL_EVERY_S
    app = subprocess.Popen(
        pgbench_command(args, script, folder, conninfo, database, seconds),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    marks = []
    for process, go in waiting:
        # an ending takes a second or two: the next starts about TRIAL_EVERY_S after the last
        # started, so the last one's after window falls inside pgbench's `seconds`
        time.sleep(TRIAL_EVERY_S - 2 if marks else BEFORE_S)
        started = time.time()
        go.set()
        process.join()
        marks.append((started, time.time()))
    app.wait(timeout=seconds + 60)
    rows = latencies(folder)

    def window(start: float, end: float) -> str:
        return summary([ms for ended, ms in rows if start <= ended < end])

    return [
        f"  ending {n} ({end - start:.1f} s):\n    {BEFORE_S:.0f} s before  "
        f"{window(start - BEFORE_S, start)}\n    while it ends {window(start, end)}\n"
        f"    {AFTER_S:.0f} s after    {window(end, end + AFTER_S)}"
        for n, (start, end) in enumerate(marks, 1)
    ]


def main(argv=None) -> int:
    parser = app_parser("python -m bench.cpu_share", __doc__, rate=0.0)
    template_options(parser)
    parser.add_argument("--seconds", type=float, default=20.0, help="of each peak measured")
    parser.add_argument("--share", type=float, default=0.75, help="of the peak, for the endings")
    parser.add_argument("--trials", type=int, default=3, help="processes ended")
    args = parser.parse_args(argv)
    scale = Scale(args.scale)
    server, template, seeded_here, script = borrowed_template(args, scale, "cpu_share_")
    copy = f"{args.prefix}_share"
    try:
        server.create(copy, template=template)
        settle_the_disk()
        conninfo = psycopg_conninfo(db_url(args.server_url, copy))
        print(
            f"# cpu share: scale {args.scale} ({scale.scraps:,} scraps), pgbench {args.clients} "
            f"clients, {args.seconds:g} s each, on {multiprocessing.cpu_count()} cores"
        )
        alone = peak(args, script, conninfo, copy, None, False)
        print(f"app alone, no rate set:            {alone:8.0f} tx/s")
        for label, last in (("ranked last", True), ("at normal priority", False)):
            beside = peak(args, script, conninfo, copy, BUSY_LOOP, last)
            print(
                f"beside a busy loop {label + ':':19s} {beside:6.0f} tx/s "
                f"({beside / alone:.0%} of alone)"
            )
        args.rate = round(alone * args.share)  # what pgbench_command paces the app at
        print(
            f"the app at {args.rate} tx/s ({args.share:.0%} of alone), a run worker's process "
            "ending:"
        )
        print("\n".join(endings(args, script, conninfo, copy)))
    finally:
        given_back(server, template, seeded_here, args, copy)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
