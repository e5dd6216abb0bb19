"""What one busy chunk of a detection's sweep costs, and where its time goes: on a fresh copy of
bench.app_latency's template (no app traffic), `--chunks` chunks of `--ids` ids (a busy chunk's
floor, FIRST_CHUNK_IDS in san/sweep.py) of each target recovery's full sweep, spread over its
table, `--rest` seconds apart, each read as the sweep reads it (its statement built once, each
chunk's range bound: `chunk_range`). Prints per sweep the chunk's time seen from the code
(median), alone and with the throttle's readings taken beside it as during a run (a Sampler's
thread), the server's planning and execution time of the same chunks (EXPLAIN ANALYZE, median;
every chunk is planned anew: the code prepares no statement, for PgBouncer), and what building
and keying the statement anew for each chunk would cost in Python (how the sweeps read before).
The throttle rests on the whole of a chunk's time while the app works, so its fixed part is what
a busy sweep's length is made of. The last line is machine-readable:

    <recovery>_chunk_ms=W <recovery>_sampled_chunk_ms=S <recovery>_plan_ms=P
    <recovery>_execute_ms=E ... build_ms=B

    .venv/bin/python -m bench.chunk_cost [--scale 1] [--chunks 200] [--ids 1000] [--rest 0]
"""

import statistics
import time
from datetime import UTC, datetime

from sqlalchemy import func, select
from sqlalchemy.dialects import postgresql

from batch_pipeline.recovery.registry import RECOVERIES
from batch_pipeline.recovery.targets import (
    ORPHAN_MIN_AGE,
    TargetRecovery,
    chunk_query,
    detect_query,
)
from batch_pipeline.san.database import create_san_engine
from batch_pipeline.san.dialects import dialect
from batch_pipeline.san.enqueue import signals_of
from batch_pipeline.san.sampler import Sampler
from batch_pipeline.san.sweep import FIRST_CHUNK_IDS, chunk_range
from bench.app_latency import borrowed_template, settle_the_disk, template_options
from bench.runner import DEFAULT_SERVER_URL, bench_parser, db_url
from bench.seed import Scale

EXPLAINED = 20  # chunks of each sweep whose plan and execution the server times


def chunk_ranges(lowest: int, highest: int, chunks: int, ids: int) -> list[tuple[int, int]]:
    """`chunks` ranges of `ids` ids, (after, upto], spread evenly over [lowest, highest]."""
    stride = max((highest - lowest + 1 - ids) // max(chunks - 1, 1), 1)
    return [(lowest - 1 + i * stride, lowest - 1 + i * stride + ids) for i in range(chunks)]


def server_times(conn, statement) -> tuple[float, float]:
    """The server's planning and execution time of `statement`, in ms (EXPLAIN ANALYZE)."""
    sql = statement.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True})
    [[plan]] = conn.exec_driver_sql(
        f"EXPLAIN (ANALYZE, SUMMARY, TIMING OFF, FORMAT JSON) {sql}"
    ).fetchone()
    return plan["Planning Time"], plan["Execution Time"]


def chunk_costs(
    engine, recovery: TargetRecovery, chunks: int, ids: int, rest: float
) -> dict[str, float]:
    """The median chunk's time from the code, alone and beside the throttle's readings (a
    Sampler's thread, as during a run), and its planning and execution on the server (ms)."""
    created_before = datetime.now(UTC) - ORPHAN_MIN_AGE
    chunk = chunk_query(recovery, created_before)
    table = recovery.table
    with engine.begin() as conn:
        lowest, highest = conn.execute(select(func.min(table.c.id), func.max(table.c.id))).one()
        ranges = chunk_ranges(lowest, highest, chunks, ids)
        dialect(conn).avoid_full_scans(conn, recovery.full_sweep_prefers)
        walls = timed_chunks(conn, chunk, ranges, rest)
        sampler = Sampler(signals_of(engine))
        try:
            sampled = timed_chunks(conn, chunk, ranges, rest)
        finally:
            sampler.stop()
        timed = [
            server_times(conn, chunk.params(chunk_range(after, upto)))
            for after, upto in ranges[:: max(len(ranges) // EXPLAINED, 1)]
        ]
    return {
        "chunk_ms": statistics.median(walls),
        "sampled_chunk_ms": statistics.median(sampled),
        "plan_ms": statistics.median(plan for plan, _ in timed),
        "execute_ms": statistics.median(execute for _, execute in timed),
    }


def timed_chunks(conn, chunk, ranges: list[tuple[int, int]], rest: float) -> list[float]:
    """Each range's chunk read as a sweep reads it, `rest` seconds apart, timed from the code
    (ms)."""
    walls = []
    for after, upto in ranges:
        time.sleep(rest)
        started = time.perf_counter()
        conn.execute(chunk, chunk_range(after, upto)).all()
        walls.append((time.perf_counter() - started) * 1000)
    return walls


def build_ms(recovery: TargetRecovery, chunks: int, ids: int) -> float:
    """Python's time to build a chunk's statement and its cache key anew (ms, mean)."""
    created_before = datetime.now(UTC) - ORPHAN_MIN_AGE
    started = time.perf_counter()
    for i in range(chunks):
        between = (i * ids, (i + 1) * ids)
        detect_query(
            recovery, created_before=created_before, ids_between=between
        )._generate_cache_key()
    return (time.perf_counter() - started) / chunks * 1000


def main(argv=None) -> int:
    parser = bench_parser("python -m bench.chunk_cost", __doc__)
    parser.add_argument("--server-url", default=DEFAULT_SERVER_URL)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--chunks", type=int, default=200, help="chunks read of each sweep")
    parser.add_argument("--ids", type=int, default=FIRST_CHUNK_IDS, help="ids in a chunk")
    parser.add_argument(
        "--rest",
        type=float,
        default=0.0,
        help="seconds between two chunks (a busy sweep rests about 0.2-0.3 s; default: none)",
    )
    template_options(parser)
    args = parser.parse_args(argv)
    if args.chunks < 1 or args.ids < 1 or args.rest < 0:
        parser.error("--chunks and --ids must be at least 1, --rest at least 0")
    server, template, seeded_here, _ = borrowed_template(args, Scale(args.scale), "chunk_cost_")
    copy = f"{args.prefix}_chunks"
    print(
        f"# a busy chunk's cost: scale {args.scale}, {args.chunks} chunks of {args.ids:,} ids "
        f"of each sweep, {args.rest:g} s apart, no app traffic; "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    )
    figures: dict[str, float] = {}
    try:
        server.create(copy, template=template)
        settle_the_disk()
        engine = create_san_engine(db_url(args.server_url, copy))
        try:
            for recovery in (r for r in RECOVERIES if isinstance(r, TargetRecovery)):
                costs = chunk_costs(engine, recovery, args.chunks, args.ids, args.rest)
                print(
                    f"  {recovery.name:18s} chunk {costs['chunk_ms']:6.2f} ms from the code, "
                    f"{costs['sampled_chunk_ms']:6.2f} ms beside the readings; server: planning "
                    f"{costs['plan_ms']:5.2f} ms, execution {costs['execute_ms']:5.2f} ms"
                )
                figures |= {f"{recovery.name}_{name}": value for name, value in costs.items()}
        finally:
            engine.dispose()
    finally:
        server.drop(copy)
        if seeded_here and not args.keep_template:
            server.drop(template)
    target = next(r for r in RECOVERIES if isinstance(r, TargetRecovery))
    figures["build_ms"] = build_ms(target, args.chunks, args.ids)
    print(
        f"  building and keying {target.name}'s statement anew: {figures['build_ms']:.2f} ms of "
        "Python a chunk (a sweep now builds it once)"
    )
    print(" ".join(f"{name}={value:.2f}" for name, value in figures.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
