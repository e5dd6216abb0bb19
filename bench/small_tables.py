"""python -m bench.small_tables [--database-url URL] [--scales 0.001,0.005,...]

How much one fast_heal_sensor tick costs on a SAN database WITHOUT the recommended indexes, by
the size of its tables: seeds each scale with the app's DDL only, analyses it, and times every
statement of one tick (database time: planning + execution, EXPLAIN ANALYZE without per-node
timing), median of 10. The sensor runs the lane without its indexes only on tables below
fast_lane/sensors.py's SMALL_TABLES_BYTES, chosen from these figures (docs/reliability.md).
"""

import statistics
import sys
from datetime import UTC, datetime

from batch_pipeline.san.database import create_san_engine, read_transaction
from bench.probe import database_ms, probe_queries
from bench.runner import DEFAULT_SERVER_URL, Server, bench_parser, db_url
from bench.seed import Scale, seed

REPEATS = 10


def measure(server_url: str, scale_factor: float, out=print) -> dict:
    server = Server(server_url, prefix="san_bench_small")
    name = server.run_db
    server.create(name)
    try:
        now = datetime.now(UTC)
        with server.connect(name) as conn:
            seed(conn, Scale(scale_factor), now)
            conn.execute("VACUUM ANALYZE")
            sizes = dict(
                conn.execute(
                    "SELECT relname, pg_total_relation_size(oid) FROM pg_class WHERE relname IN "
                    "('jobs', 'scraps', 'daily_summaries')"
                ).fetchall()
            )
            engine = create_san_engine(db_url(server_url, name))
            with read_transaction(engine) as sa_conn:
                statements = []
                for _label, query in probe_queries(sa_conn, now):
                    compiled = query.compile(
                        dialect=engine.dialect, compile_kwargs={"render_postcompile": True}
                    )
                    statements.append((str(compiled), compiled.params))
            engine.dispose()
            times = sorted(
                sum(database_ms(conn, sql, params) for sql, params in statements)
                for _ in range(REPEATS + 1)
            )[:-1]
        figures = {
            "scale": scale_factor,
            "scraps": Scale(scale_factor).scraps,
            "jobs_mb": sizes["jobs"] / 2**20,
            "scraps_mb": sizes["scraps"] / 2**20,
            "summaries_mb": sizes["daily_summaries"] / 2**20,
            "tick_ms": statistics.median(times),
        }
        out(
            f"scale {scale_factor:<6} scraps {figures['scraps']:>9,}  "
            f"jobs {figures['jobs_mb']:7.1f} MB  scraps {figures['scraps_mb']:7.1f} MB  "
            f"summaries {figures['summaries_mb']:6.1f} MB  "
            f"one tick without the indexes: {figures['tick_ms']:7.1f} ms of database time"
        )
        return figures
    finally:
        server.drop(name)


def main(argv=None) -> int:
    parser = bench_parser("python -m bench.small_tables", __doc__)
    parser.add_argument("--database-url", default=DEFAULT_SERVER_URL)
    parser.add_argument("--scales", default="0.001,0.002,0.005,0.01,0.02,0.05")
    args = parser.parse_args(argv)
    print(
        f"# a fast_heal_sensor tick without the recommended indexes, {datetime.now(UTC):%Y-%m-%d}"
    )
    for scale in (float(s) for s in args.scales.split(",")):
        measure(args.database_url, scale)
    return 0


if __name__ == "__main__":
    sys.exit(main())
