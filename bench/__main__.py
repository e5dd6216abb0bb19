"""python -m bench --scale S [--database-url URL] [--repeats N] [--keep]

Seeds a SAN database at scale S on the PostgreSQL server of URL (default: the local server),
then, in this process and on identical copies of that state (restored from a template database
before every run), times back to back: the raw-SQL baseline and the pipeline (recovery_job and
one til_auto_generation_job partition through Dagster's execute_in_process), without and with
the recommended indexes. Prints medians, ratios, plan shapes, per-op timings, rows changed and
peak RSS; the last line is machine-readable:

    ratio recovery=X.XX til=Y.YY overhead_s=Z.Z rss_mb=N probe_ms=P.P

(probe_ms: one fast_heal_sensor tick's probe with the indexes.) `--probe-only` seeds, indexes
and prints the plan shapes and the probe's figures, nothing else (scale 10 in a fraction of the
full run's time); its last line is `probe_ms=P.P`. The pipeline writes 5,000-row batches back to
back, the work itself; `--paced` times it with its default batches and rests instead.
"""

import sys

from bench.runner import DEFAULT_SERVER_URL, bench_parser, run_benchmark


def main(argv=None) -> int:
    parser = bench_parser("python -m bench", __doc__)
    parser.add_argument(
        "--scale", type=float, required=True, help="1 = 2,000,000 scraps; 0.1 for CI-sized runs"
    )
    parser.add_argument(
        "--database-url",
        default=DEFAULT_SERVER_URL,
        help="any database on the PostgreSQL server to use; the benchmark creates its own "
        "san_bench_* databases there (default: %(default)s)",
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="runs of each measurement (median reported)"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the san_bench_* databases afterwards"
    )
    parser.add_argument(
        "--only-indexed",
        action="store_true",
        help="with the recommended indexes only: two database copies at once instead of three "
        "(scale 10 needs ~2 x 27 GB then)",
    )
    parser.add_argument(
        "--probe-only",
        action="store_true",
        help="only the plan shapes and the fast lane's probe, with the indexes",
    )
    parser.add_argument(
        "--paced",
        action="store_true",
        help="the pipeline writes with its default batches and rests (what a production run "
        "takes) instead of 5,000-row batches back to back",
    )
    args = parser.parse_args(argv)
    if args.scale <= 0 or args.repeats < 1:
        parser.error("--scale must be > 0 and --repeats >= 1")
    result = run_benchmark(
        args.scale,
        args.database_url,
        repeats=args.repeats,
        keep=args.keep,
        out=print,
        only_indexed=args.only_indexed,
        probe_only=args.probe_only,
        paced=args.paced,
    )
    print(result.summary_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
