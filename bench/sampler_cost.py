"""What the throttle's own readings cost SAN's app: pgbench plays the app (bench.app_latency's
APP_SCRIPT) at `--rate` on a fresh copy of bench.app_latency's template, and its traffic is cut
into windows of `--window` seconds, `--rounds` times in turn: the app alone, then the app while a
Sampler (san/sampler.py) reads the database every `--every` seconds as during a run, nothing else
of ours running. Prints each window's p99, both kinds' p99 over all their windows, and how long
one reading takes seen from the client, back to back (checkout, settings, statement and commit:
the server's share of it is at most that). The last line is machine-readable:

    alone_p99_ms=A sampled_p99_ms=S ratio=R reading_ms=M

    .venv/bin/python -m bench.sampler_cost [--scale 1] [--rate 150] [--window 30] [--rounds 3]
        [--every 0.1]
"""

import time
from datetime import UTC, datetime
from pathlib import Path

from batch_pipeline.san.database import create_san_engine
from batch_pipeline.san.enqueue import signals_of
from batch_pipeline.san.sampler import RESTING_SAMPLE_EVERY, SAMPLE_EVERY, Sampler
from bench.app_latency import (
    WARM_UP_S,
    app_parser,
    borrowed_template,
    latencies,
    percentile,
    settle_the_disk,
    template_options,
)
from bench.runner import db_url
from bench.seed import Scale
from bench.step_load import pgbench

ALONE, SAMPLED = "app alone", "app + readings"
TIMED_READINGS = 200


def windows(args, engine) -> list[tuple[str, float, float]]:
    """(kind, start, end) of each window, alone and sampled in turn."""
    cut = []
    for _ in range(args.rounds):
        start = time.time()
        time.sleep(args.window)
        cut.append((ALONE, start, time.time()))
        start = time.time()
        sampler = Sampler(signals_of(engine), every=args.every)
        time.sleep(args.window)
        sampler.stop()
        cut.append((SAMPLED, start, time.time()))
    return cut


def reading_ms(engine) -> float:
    """One reading's mean time, back to back: what each costs the server, at most."""
    read = signals_of(engine)
    started = time.perf_counter()
    for _ in range(TIMED_READINGS):
        read()
    return (time.perf_counter() - started) / TIMED_READINGS * 1000


def main(argv=None) -> int:
    parser = app_parser("python -m bench.sampler_cost", __doc__, rate=150.0)
    parser.add_argument("--window", type=float, default=30.0, help="seconds per window")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--every",
        type=float,
        default=SAMPLE_EVERY,
        help=f"seconds between two readings: {SAMPLE_EVERY:g} while a run writes (the default), "
        f"{RESTING_SAMPLE_EVERY:g} while it rests",
    )
    template_options(parser)
    args = parser.parse_args(argv)
    scale = Scale(args.scale)
    server, template, seeded_here, script = borrowed_template(args, scale, "sampler_cost_")
    with server.autovacuum(args.autovacuum):
        return compared(args, server, template, seeded_here, script)


def compared(args, server, template: str, seeded_here: bool, script: Path) -> int:
    """The app alone and sampled, in windows taking turns, on a fresh copy of the template."""
    folder, copy = script.parent, f"{args.prefix}_sampler"
    print(
        f"# the throttle's readings (every {args.every:g} s) against the app alone: scale "
        f"{args.scale}, pgbench {args.clients} clients at {args.rate:g} tx/s, {args.rounds} rounds "
        f"of {args.window:g} s windows; {datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    )
    print(server.settings_line())
    engine = None
    try:
        server.create(copy, template=template)
        settle_the_disk()
        engine = create_san_engine(db_url(args.server_url, copy))
        seconds = WARM_UP_S + 2 * args.window * args.rounds + 5
        app = pgbench(args, script, folder, copy, seconds)
        time.sleep(WARM_UP_S)
        cut = windows(args, engine)
        app.communicate(timeout=seconds + 60)
        cost = reading_ms(engine)
    finally:
        if engine is not None:
            engine.dispose()
        server.drop(copy)
        if seeded_here and not args.keep_template:
            server.drop(template)
    rows = latencies(folder)
    of_kind: dict[str, list[float]] = {ALONE: [], SAMPLED: []}
    for kind, start, end in cut:
        window = [ms for ended, ms in rows if start <= ended < end]
        of_kind[kind] += window
        print(f"  {kind:15s} {len(window):5d} tx  p99 {percentile(window, 0.99):6.2f} ms")
    alone, sampled = (percentile(of_kind[kind], 0.99) for kind in (ALONE, SAMPLED))
    print(f"all windows: {ALONE} p99 {alone:.2f} ms, {SAMPLED} p99 {sampled:.2f} ms")
    print(f"one reading: {cost:.2f} ms (mean of {TIMED_READINGS}, back to back)")
    print(
        f"alone_p99_ms={alone:.2f} sampled_p99_ms={sampled:.2f} ratio={sampled / alone:.2f} "
        f"reading_ms={cost:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
