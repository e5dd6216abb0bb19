"""python -m bench.metrics_scrape [--database-url URL] [--scale 1]

What one reading of the metrics endpoint costs SAN's database: seeds the benchmark's SAN at
`--scale` (scale 1: 2,000,000 scraps, about 6 M jobs, 25,000 ghosts, 50,000 healthy active
jobs), then times `read_san` (the ghost backlog, the oldest active job, the recent failures,
the fast lane's indexes: everything a scrape asks SAN) with the recommended indexes and without
them, median of 10 readings, wall time on a client beside the server (a reading over its
statement timeout is said so: the endpoint reports batch_pipeline_san_up 0 then). The
endpoint caches a reading for --cache-seconds (10 by default): this is what Prometheus costs
SAN every 10 s at most, however many scrape it. Figures: docs/benchmarks.md, "The metrics
endpoint's cost to SAN".
"""

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime

from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError

from batch_pipeline.monitoring.san_readings import SCRAPE_LIMITS, read_san
from batch_pipeline.san.database import create_san_engine, read_transaction
from batch_pipeline.san.indexes import ACTIVE_JOBS_INDEX
from batch_pipeline.san.schema import create_recommended_indexes
from batch_pipeline.san.tables import jobs
from bench.runner import DEFAULT_SERVER_URL, Server, db_url
from bench.seed import Scale, seed

REPEATS = 10


def timed_readings(engine) -> tuple[float | None, int]:
    """Median milliseconds of REPEATS readings (after one to warm the cache), and the ghosts
    the last one counted; None when a reading hits its statement timeout (the endpoint then
    says batch_pipeline_san_up 0)."""
    times, stale = [], 0
    for _ in range(REPEATS + 1):
        started = time.perf_counter()
        try:
            with read_transaction(engine, SCRAPE_LIMITS) as conn:
                readings = read_san(conn)
        except OperationalError as error:
            if "statement timeout" in str(error):
                return None, 0
            raise
        times.append((time.perf_counter() - started) * 1000)
        stale = sum(active.stale for active in readings.active_jobs)
    return statistics.median(times[1:]), stale


def said(ms: float | None) -> str:
    limit = SCRAPE_LIMITS.statement_timeout_ms
    return f"{ms:.1f} ms" if ms is not None else f"over its {limit:,} ms statement timeout"


def measure(
    server_url: str, scale_factor: float, out=print, prefix: str = "san_bench_metrics"
) -> dict:
    server = Server(server_url, prefix=prefix)
    name = server.run_db
    server.create(name)
    try:
        with server.connect(name) as conn:
            seed(conn, Scale(scale_factor), datetime.now(UTC))
            conn.execute("VACUUM ANALYZE")
        engine = create_san_engine(db_url(server_url, name))
        with engine.connect() as conn:
            job_rows = conn.execute(select(func.count()).select_from(jobs)).scalar_one()
        without_ms, _ = timed_readings(engine)
        create_recommended_indexes(engine)
        with engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE jobs")
        with_ms, stale = timed_readings(engine)
        with engine.connect() as conn:
            index_bytes = conn.exec_driver_sql(
                f"SELECT pg_relation_size('{ACTIVE_JOBS_INDEX}')"
            ).scalar_one()
        engine.dispose()
        figures = {
            "scale": scale_factor,
            "scraps": Scale(scale_factor).scraps,
            "jobs": job_rows,
            "ghosts": stale,
            "with_indexes_ms": with_ms,
            "without_indexes_ms": without_ms,
            "active_index_mb": index_bytes / 2**20,
        }
        out(
            f"scale {scale_factor}: {figures['scraps']:,} scraps, {job_rows:,} jobs, "
            f"{stale:,} ghosts counted; one reading (median of {REPEATS}): "
            f"{said(with_ms)} with the recommended indexes, {said(without_ms)} without; "
            f"{ACTIVE_JOBS_INDEX}: {figures['active_index_mb']:.1f} MB"
        )
        return figures
    finally:
        server.drop(name)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.metrics_scrape", description=__doc__)
    parser.add_argument("--database-url", default=DEFAULT_SERVER_URL, help="a PostgreSQL server")
    parser.add_argument("--scale", type=float, default=1.0)
    args = parser.parse_args(argv)
    measure(args.database_url, args.scale)
    return 0


if __name__ == "__main__":
    sys.exit(main())
