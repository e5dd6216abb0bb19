"""Writers taking turns: several TIL backfill days and a recovery run at once, on one seeded
database. Every batch_pipeline write batch holds one advisory lock (san/dialects/postgresql.py,
take_write_lock); does a slow batch fail the others?

Seeds a scratch database at `--scale` (bench/seed.py, the recommended indexes built), then
starts `--days` til_auto_generation_job partitions (the days before yesterday, ~20,000 active
users each at scale 1) and one recovery_job, each in a process of its own, at the same moment,
with the default run config (lock_timeout 5 s). Prints per run: success, wall seconds, step
retries and lock timeouts. `--lock-wait-is-lock-timeout` replays the code before the fix (the
advisory lock waited only lock_timeout). docs/benchmarks.md, "Writers taking turns", holds a run.

    .venv/bin/python -m bench.lock_contention [--scale 1] [--days 4] [--lock-wait-is-lock-timeout]
"""

import multiprocessing
import time
from datetime import timedelta
from zoneinfo import ZoneInfo

import psycopg
from sqlalchemy import text

from batch_pipeline.san.database import create_san_engine, utc_now
from batch_pipeline.san.dialects import postgresql
from batch_pipeline.san.schema import create_recommended_indexes
from bench.runner import bench_parser, psycopg_conninfo, run_pipeline
from bench.seed import Scale, seed
from san_sandbox.scratch import scratch_database

ZONE = "Asia/Seoul"


def old_lock_wait() -> None:
    """The code before the fix: the advisory lock under the batch's own lock_timeout."""

    def take_write_lock(conn, limits):
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": postgresql.WRITE_LOCK_KEY})

    postgresql.take_write_lock = take_write_lock


def one_run(job_name: str, url: str, partition_key, old: bool, start_at: float, results) -> None:
    if old:
        old_lock_wait()
    time.sleep(max(0.0, start_at - time.time()))  # every run starts at the same moment
    try:
        elapsed, result, _instance = run_pipeline(job_name, url, {}, partition_key=partition_key)
        events = result.all_events
        retries = [e for e in events if e.event_type_value == "STEP_UP_FOR_RETRY"]
        failures = [e for e in events if e.event_type_value == "STEP_FAILURE"]
        messages = [str(e.event_specific_data.error) for e in retries + failures]
        results.put(
            (
                job_name,
                partition_key,
                result.success,
                elapsed,
                len(retries),
                sum("lock timeout" in message for message in messages),
            )
        )
    except Exception as error:  # a failed run raises out of execute_in_process
        results.put(
            (
                job_name,
                partition_key,
                False,
                time.time() - start_at,
                -1,
                int("lock timeout" in str(error)),
            )
        )


def run(
    server_url: str, scale: float, days: int, old: bool, out=print, start_delay_s: float = 20.0
) -> list[tuple]:
    with scratch_database(server_url, prefix="bench_locks") as url:
        started = time.perf_counter()
        now = utc_now()
        with psycopg.connect(**psycopg_conninfo(url), autocommit=True) as conn:
            seed(conn, Scale(scale), now)
        engine = create_san_engine(url)
        create_recommended_indexes(engine)
        engine.dispose()
        out(
            f"seeded scale {scale} in {time.perf_counter() - started:.0f} s; {days} TIL days and "
            "one recovery_job "
            "at once"
            + (" (before the fix: the advisory lock waits only lock_timeout)" if old else "")
        )
        yesterday = (now.astimezone(ZoneInfo(ZONE)) - timedelta(days=1)).date()
        runs = [
            ("til_auto_generation_job", str(yesterday - timedelta(days=k)))
            for k in range(1, days + 1)
        ]
        runs.append(("recovery_job", None))
        context = multiprocessing.get_context("spawn")
        results = context.Queue()
        start_at = time.time() + start_delay_s  # time for every process to import Dagster first
        processes = [
            context.Process(target=one_run, args=(job, url, key, old, start_at, results))
            for job, key in runs
        ]
        for process in processes:
            process.start()
        rows = [results.get(timeout=1800) for _ in processes]
        for process in processes:
            process.join()
        for job, key, success, elapsed, retries, lock_timeouts in sorted(
            rows, key=lambda r: (r[0], r[1] or "")
        ):
            out(
                f"  {job:24s} {key or '':10s} {'success' if success else 'FAILED ':7s} "
                f"{elapsed:6.1f} s, "
                f"step retries {retries}, lock timeouts {lock_timeouts}"
            )
        return rows


def main(argv=None) -> int:
    parser = bench_parser("python -m bench.lock_contention", __doc__)
    parser.add_argument(
        "--server-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    )
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--days", type=int, default=4)
    parser.add_argument(
        "--lock-wait-is-lock-timeout", action="store_true", help="replay the code before the fix"
    )
    args = parser.parse_args(argv)
    rows = run(args.server_url, args.scale, args.days, args.lock_wait_is_lock_timeout)
    return 0 if all(row[2] for row in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
