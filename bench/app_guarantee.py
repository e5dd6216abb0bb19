"""What the app-side guarantee costs: the unique index on jobs (job_type, target_id) WHERE
status IN ('PENDING', 'PROCESSING') that `show-indexes` and `doctor` offer SAN's team
(batch_pipeline/san/schema.py, APP_ONE_ACTIVE_JOB).

On a scratch PostgreSQL database made from the app's DDL with batch_pipeline's recommended
indexes, `--jobs` jobs (about 1.4 % of them active, as at bench scale 1), measured without and
then with the index: its build (CREATE UNIQUE INDEX CONCURRENTLY) and size, the app's own
enqueue (one single-row INSERT transaction per job), a worker's transitions (PENDING ->
PROCESSING -> COMPLETED, one transaction each) and batch_pipeline's enqueue of one 5,000-target
batch (ON CONFLICT DO NOTHING). docs/benchmarks.md, "The app-side guarantee", holds a run.

    .venv/bin/python -m bench.app_guarantee [--jobs 5400000] [--server-url postgresql+psycopg://...]
"""

import time
from statistics import median

from sqlalchemy import text

from batch_pipeline.san.database import create_san_engine, database_now, write_transaction
from batch_pipeline.san.enqueue import enqueue_jobs
from batch_pipeline.san.indexes import APP_ONE_ACTIVE_JOB
from batch_pipeline.san.job_source import EnqueueRequest
from batch_pipeline.san.schema import app_guarantee_statement
from batch_pipeline.san.tables import CARD_ANALYSIS
from bench.runner import bench_parser
from san_sandbox.app_schema import init_sandbox
from san_sandbox.scratch import scratch_database

SINGLE_ROW_WRITES = 5_000
RECOVERY_BATCH = 5_000
REPEATS = 3

FILL_JOBS = """
INSERT INTO jobs (job_type, target_id, status, created_at, updated_at, started_at, finished_at)
SELECT CASE WHEN g % 2 = 0 THEN 'CARD_ANALYSIS' ELSE 'SCRAP_REFINE' END, g / 2,
       CASE WHEN g % 140 = 0 THEN 'PENDING' WHEN g % 141 = 0 THEN 'PROCESSING' ELSE 'COMPLETED' END,
       now() - make_interval(secs => g % 864000), now(), now(), now()
FROM generate_series(1, :jobs) AS g
"""


def timed_single_rows(conn, statement: str, params: list[dict]) -> float:
    """Milliseconds per statement, each in a transaction of its own (as the app and a worker do)."""
    started = time.perf_counter()
    for values in params:
        conn.execute(text(statement), values)
        conn.commit()
    return 1000 * (time.perf_counter() - started) / len(params)


def measure(engine, first_target: int, writes: int, batch: int) -> dict:
    """One round on fresh targets (ids from `first_target`): what the app, a worker and a
    recovery batch pay."""
    targets = list(range(first_target, first_target + writes))
    with engine.connect() as conn:
        insert_ms = timed_single_rows(
            conn,
            (
                "INSERT INTO jobs (job_type, target_id, status, created_at, updated_at) "
                "VALUES ('CARD_ANALYSIS', :target, 'PENDING', now(), now())"
            ),
            [{"target": t} for t in targets],
        )
        ids = (
            conn.execute(
                text(
                    "SELECT id FROM jobs WHERE target_id >= :first AND target_id < :end AND "
                    "job_type = 'CARD_ANALYSIS' ORDER BY id"
                ),
                {"first": first_target, "end": first_target + writes},
            )
            .scalars()
            .all()
        )
        conn.commit()
        claim_ms = timed_single_rows(
            conn,
            "UPDATE jobs SET status = 'PROCESSING', started_at = now(), updated_at = now() "
            "WHERE id = :id AND status = 'PENDING'",
            [{"id": i} for i in ids],
        )
        complete_ms = timed_single_rows(
            conn,
            "UPDATE jobs SET status = 'COMPLETED', finished_at = now(), updated_at = now() "
            "WHERE id = :id AND status = 'PROCESSING'",
            [{"id": i} for i in ids],
        )
    batch_targets = range(first_target + writes, first_target + writes + batch)
    started = time.perf_counter()
    with write_transaction(engine) as conn:
        outcome = enqueue_jobs(
            conn,
            CARD_ANALYSIS,
            [EnqueueRequest(t) for t in batch_targets],
            now=database_now(conn),
            max_attempts=0,
        )
    batch_ms = 1000 * (time.perf_counter() - started)
    assert len(outcome.created) == batch
    return {
        "app insert ms": insert_ms,
        "worker claim ms": claim_ms,
        "worker complete ms": complete_ms,
        "recovery batch ms": batch_ms,
    }


def run(
    server_url: str,
    jobs: int,
    out=print,
    writes: int = SINGLE_ROW_WRITES,
    batch: int = RECOVERY_BATCH,
) -> dict:
    with scratch_database(server_url, prefix="bench_guarantee") as url:
        engine = create_san_engine(url)
        init_sandbox(engine)  # the app's DDL and batch_pipeline's recommended indexes
        started = time.perf_counter()
        with engine.begin() as conn:
            conn.execute(text(FILL_JOBS), {"jobs": jobs})
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").execute(
                text("VACUUM ANALYZE jobs")
            )
            active = conn.execute(
                text("SELECT count(*) FROM jobs WHERE status IN ('PENDING', 'PROCESSING')")
            ).scalar_one()
        out(
            f"{jobs:,} jobs ({active:,} active) in {time.perf_counter() - started:.0f} s; "
            f"{writes:,} single-row writes of each kind, a {batch:,}-target recovery batch, "
            f"{REPEATS} rounds each"
        )
        figures: dict[str, dict[str, float]] = {}
        next_target = jobs  # beyond every seeded target
        for mode in ("without", "with"):
            if mode == "with":
                with engine.connect() as conn:
                    auto = conn.execution_options(isolation_level="AUTOCOMMIT")
                    started = time.perf_counter()
                    auto.execute(text(app_guarantee_statement("postgresql")))
                    build_s = time.perf_counter() - started
                    size = auto.execute(
                        text("SELECT pg_relation_size(:name)"), {"name": APP_ONE_ACTIVE_JOB.name}
                    ).scalar_one()
                out(
                    f"CREATE UNIQUE INDEX CONCURRENTLY {APP_ONE_ACTIVE_JOB.name}: {build_s:.1f} s, "
                    f"{size / 1e6:.1f} MB"
                )
                figures["build"] = {"seconds": build_s, "mb": size / 1e6}
            rounds = []
            for _ in range(REPEATS):
                rounds.append(measure(engine, next_target, writes, batch))
                next_target += writes + batch
            figures[mode] = {name: median(r[name] for r in rounds) for name in rounds[0]}
            out(
                f"{mode} the index: "
                + ", ".join(f"{name} {value:.3f}" for name, value in figures[mode].items())
            )
        engine.dispose()
    return figures


def main(argv=None) -> int:
    parser = bench_parser("python -m bench.app_guarantee", __doc__)
    parser.add_argument(
        "--server-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    )
    parser.add_argument(
        "--jobs", type=int, default=5_400_000, help="seeded jobs (bench scale 1 has 5.4 M)"
    )
    args = parser.parse_args(argv)
    run(args.server_url, args.jobs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
