"""python -m bench.explain [--server-url URL] [--days 90] [--scale 1] [--per-minute 1]

How fast `explain` answers on a Dagster instance holding DAYS of history (PostgreSQL storage, as
in production): recovery_job every 2 h (its four areas' materializations), the daily TIL, and
the fast lane at PER_MINUTE fast_heal_job runs and PER_MINUTE re-announcement rounds a minute,
with ids drawn from a SAN database seeded at SCALE (bench/seed.py, with the recommended indexes).
One scrap's story runs through it all: re-enqueued, retried, announced again, listed exhausted
run after run for weeks, redriven.

Prints: the time to write the history, the index's catch-up from nothing (events/s), and the
explain call (SAN's story + the instance's) for that scrap, one of its jobs and an untouched
scrap, median and max of REPEATS; then the whole command's wall time in a fresh process (Python
and Dagster's import included). The history holds the audit's events only (the runs' other
events are not in the asset-keyed lookups these read).
"""

import argparse
import logging
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from dagster import AssetMaterialization, DagsterInstance
from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData
from dagster._core.events.log import EventLogEntry
from sqlalchemy import text
from sqlalchemy.engine import make_url

from batch_pipeline.fast_lane.announcements import AnnounceReport
from batch_pipeline.fast_lane.assets import REANNOUNCEMENTS_ASSET, RETRIES_ASSET
from batch_pipeline.fast_lane.retries import retries_metadata
from batch_pipeline.recovery.ghost_jobs import AREA as GHOST_AREA
from batch_pipeline.recovery.orphan_scraps import ORPHAN_SCRAPS
from batch_pipeline.recovery.plan import RecoveryReport
from batch_pipeline.recovery.unrefined_scraps import UNREFINED_SCRAPS
from batch_pipeline.recovery.unwritten_tils import UNWRITTEN_TILS
from batch_pipeline.san.database import create_san_engine
from batch_pipeline.san.ops import as_metadata
from batch_pipeline.san.schema import create_recommended_indexes
from batch_pipeline.support.audit_index import retention_horizon, update_index
from batch_pipeline.support.explain import explain
from batch_pipeline.support.redrive import RedriveReport
from batch_pipeline.support.touches import REDRIVE_ASSET
from bench.runner import DEFAULT_SERVER_URL, Server, db_url
from bench.seed import Scale, seed

REPEATS = 20
WRITE_BATCH = 500
ROOT = Path(__file__).resolve().parents[1]


def entry(asset: str, metadata: dict, at: float, run_id: str) -> EventLogEntry:
    job = "__RUNLESS__" if not run_id else "recovery_job"
    return EventLogEntry(
        error_info=None,
        level=logging.INFO,
        user_message="",
        run_id=run_id,
        timestamp=at,
        step_key=None if not run_id else asset,
        job_name=job,
        dagster_event=DagsterEvent(
            event_type_value=DagsterEventType.ASSET_MATERIALIZATION.value,
            job_name=job,
            event_specific_data=StepMaterializationData(
                AssetMaterialization(asset_key=asset, metadata=as_metadata(metadata))
            ),
        ),
    )


def target_report(recovery, recovered=(), exhausted=()) -> dict:
    key = getattr(recovery, "id_key", "scrap_id")
    return RecoveryReport(
        area=recovery.area,
        dry_run=False,
        thresholds={},
        detected=len(recovered) + len(exhausted),
        enqueued=len(recovered),
        exhausted=len(exhausted),
        recovered=[{key: t, "new_job_id": j} for t, j in recovered],
        exhausted_ids=list(exhausted),
    ).metadata()


def history(days: int, per_minute: float, scraps: int, target: int, target_jobs: list[int]):
    """The events, oldest first, as (asset, metadata, timestamp, run_id)."""
    rng = random.Random(42)
    now = time.time()
    start = now - days * 86_400
    new_job = 10**8  # the pipeline's new job ids, far above the seeded ones
    poison = sorted(rng.sample(range(1, scraps), 50))
    exhausted_from = start + 0.3 * days * 86_400  # the target is at the cap from then on

    def recent_scrap(at: float) -> int:
        return max(1, int(scraps * (at - start) / (now - start)) - rng.randint(0, 2_000))

    events = []
    minute = 60.0
    at = start
    while at < now - 120:
        at += minute / per_minute
        new_job += 2
        scrap = recent_scrap(at)
        retried = [(scrap, new_job), (scrap + 1, new_job + 1)]
        lane = RecoveryReport(area=ORPHAN_SCRAPS.area, dry_run=False, thresholds={})
        lane.recovered = [{"scrap_id": s, "new_job_id": j} for s, j in retried]
        events.append((RETRIES_ASSET, retries_metadata([lane]), at, uuid.uuid4().hex))
        announced = [new_job - rng.randint(10, 500) for _ in range(3)]
        events.append(
            (
                REANNOUNCEMENTS_ASSET,
                AnnounceReport(detected=3, announced=3, announced_ids=announced).metadata(),
                at + 7,
                "",
            )
        )
    for run in range(int(days * 12)):
        at = start + run * 7_200 + 30
        run_id = uuid.uuid4().hex
        exhausted = poison + ([target] if at > exhausted_from else [])
        recovered = [(recent_scrap(at), new_job + n) for n in range(20)]
        new_job += 40
        ghosts = [
            {
                "failed_job_id": new_job - 100 - n,
                "new_job_id": new_job + n,
                "job_type": "CARD_ANALYSIS",
                "target_id": recent_scrap(at),
                "stale_status": "PENDING",
            }
            for n in range(10)
        ]
        ghost = RecoveryReport(area=GHOST_AREA, dry_run=False, thresholds={}, recovered=ghosts)
        events += [
            (GHOST_AREA, ghost.metadata(), at, run_id),
            (ORPHAN_SCRAPS.area, target_report(ORPHAN_SCRAPS, recovered, exhausted), at, run_id),
            (UNREFINED_SCRAPS.area, target_report(UNREFINED_SCRAPS, recovered[:5]), at, run_id),
            (UNWRITTEN_TILS.area, target_report(UNWRITTEN_TILS, [(run, new_job)]), at, run_id),
        ]
    # the target's own story: re-enqueued early, retried, announced again, then redriven
    story_at = start + 0.25 * days * 86_400
    events.append(
        (
            ORPHAN_SCRAPS.area,
            target_report(ORPHAN_SCRAPS, [(target, target_jobs[1])]),
            story_at,
            uuid.uuid4().hex,
        )
    )
    for n, job in enumerate(target_jobs[2:-1]):
        lane = RecoveryReport(area=ORPHAN_SCRAPS.area, dry_run=False, thresholds={})
        lane.recovered = [{"scrap_id": target, "new_job_id": job}]
        events.append(
            (RETRIES_ASSET, retries_metadata([lane]), story_at + 60 * (n + 1), uuid.uuid4().hex)
        )
        if n < 2:
            announced = AnnounceReport(detected=1, announced=1, announced_ids=[job]).metadata()
            events.append((REANNOUNCEMENTS_ASSET, announced, story_at + 60 * n + 20, ""))
    redrive = RedriveReport(
        area=ORPHAN_SCRAPS.area,
        dry_run=False,
        filter=f"ids {target}",
        max_attempts=10,
        asked_by="cli ops@bastion",
        reason="the AI service's fix",
        redriven=[
            {
                "area": ORPHAN_SCRAPS.area,
                "target_id": target,
                "new_job_id": target_jobs[-1],
                "attempts_before": 10,
                "last_job_id": target_jobs[-2],
                "last_error": "AI call failed",
            }
        ],
    )
    events.append((REDRIVE_ASSET, redrive.metadata(), now - 86_400, uuid.uuid4().hex))
    events.sort(key=lambda event: event[2])
    return events


def the_target(engine, scrap: int) -> list[int]:
    """Give scrap `scrap` (a seeded orphan, one FAILED CARD_ANALYSIS) a history of 10 FAILED
    CARD_ANALYSIS jobs and a redriven PENDING one; its job ids, oldest first."""
    with engine.begin() as conn:
        for n in range(9):
            conn.execute(
                text(
                    "INSERT INTO jobs (job_type, target_id, status, created_at, updated_at, "
                    "started_at, finished_at, error_message) VALUES ('CARD_ANALYSIS', :s, "
                    "'FAILED', now() - make_interval(days => 60 - :n), now() - make_interval("
                    "days => 60 - :n), now() - make_interval(days => 60 - :n), now() - "
                    "make_interval(days => 60 - :n), 'AI call failed')"
                ),
                {"s": scrap, "n": n},
            )
        conn.execute(
            text(
                "INSERT INTO jobs (job_type, target_id, status, created_at, updated_at) VALUES "
                "('CARD_ANALYSIS', :s, 'PENDING', now() - interval '1 day', now() - interval "
                "'1 day')"
            ),
            {"s": scrap},
        )
        return list(
            conn.execute(
                text(
                    "SELECT id FROM jobs WHERE target_id = :s AND job_type = 'CARD_ANALYSIS' "
                    "ORDER BY id"
                ),
                {"s": scrap},
            ).scalars()
        )


def timed(call, repeats: int) -> tuple[float, float]:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), max(times)


def run(
    server_url: str,
    days: int = 90,
    scale: float = 1.0,
    per_minute: float = 1.0,
    repeats: int = REPEATS,
    command_runs: int = 5,
    keep: bool = False,
    out=print,
) -> dict:
    """Build the history, index it, time explain; the figures (milliseconds, seconds)."""
    server = Server(server_url, prefix=f"bench_explain_{uuid.uuid4().hex[:6]}")
    san, storage = server.run_db, server.empty_db
    server.create(san)
    server.create(storage)
    home = Path(tempfile.mkdtemp(prefix="bench_explain_"))
    prod = (ROOT / "deploy" / "dagster.prod.yaml").read_text()
    storage_section = prod.index("storage:")
    (home / "dagster.yaml").write_text(
        prod[storage_section : prod.index("\n\n", storage_section)] + "\n"
    )
    url = make_env(server, storage)
    figures: dict = {}
    try:
        started = time.perf_counter()
        with server.connect(san) as conn:
            seed(conn, Scale(scale), datetime.now(UTC))
        engine = create_san_engine(url)
        create_recommended_indexes(engine)
        target = 7  # id % 100 = 7: a seeded orphan
        target_jobs = the_target(engine, target)
        out(
            f"SAN database: scale {scale} ({Scale(scale).scraps:,} scraps), seeded in "
            f"{time.perf_counter() - started:.0f} s"
        )
        instance = DagsterInstance.from_config(str(home))
        started = time.perf_counter()
        events = history(days, per_minute, Scale(scale).scraps, target, target_jobs)
        tail = events[-100:]  # written after the index pass: what the sensor has not read yet
        indexed = events[: len(events) - len(tail)]
        for first in range(0, len(indexed), WRITE_BATCH):
            batch = indexed[first : first + WRITE_BATCH]
            instance.event_log_storage.store_event_batch([entry(*event) for event in batch])
        figures["events"] = len(events)
        out(
            f"history: {days} days, {len(events):,} audit events ({per_minute:g} fast lane "
            f"run(s) and round(s) a minute, recovery_job every 2 h), written in "
            f"{time.perf_counter() - started:.0f} s"
        )
        started = time.perf_counter()
        progress = update_index(instance, retention_horizon(None, 3650), budget=timedelta(hours=2))
        built = time.perf_counter() - started
        figures["index_events_per_s"] = progress.events / built
        out(
            f"audit index from nothing: {progress.events:,} events, {progress.touches:,} touches, "
            f"{built:.0f} s ({progress.events / built:,.0f} events/s)"
        )
        instance.event_log_storage.store_event_batch([entry(*event) for event in tail])
        explained = explain(engine, instance, "scrap", target)
        figures["story"] = [(t.asset, t.action, t.times) for t in explained.touches]
        out(f"scrap {target}'s story: " + "; ".join(summary(explained)))
        for label, kind, target_id in (
            ("whole_story", "scrap", target),
            ("through_a_job", "job", target_jobs[3]),
            ("untouched", "scrap", 8),
        ):
            median, longest = timed(
                lambda k=kind, t=target_id: explain(engine, instance, k, t), repeats
            )
            figures[label] = (median, longest)
            out(
                f"explain {kind} {target_id} ({label.replace('_', ' ')}): median {median:.0f} ms, "
                f"max {longest:.0f} ms (of {repeats})"
            )
        env = {**os.environ, "DAGSTER_HOME": str(home), "SAN_DATABASE_URL": url}
        walls = []
        for _ in range(command_runs):
            started = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "batch_pipeline", "explain", "scrap", str(target)],
                env=env,
                check=True,
                capture_output=True,
                cwd=ROOT,
            )
            walls.append(time.perf_counter() - started)
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import dagster"], check=True, cwd=ROOT)
        figures["command_s"] = statistics.median(walls)
        out(
            f"python -m batch_pipeline explain scrap {target}, a fresh process: median "
            f"{figures['command_s']:.2f} s (of {command_runs}); `python -c 'import dagster'` "
            f"alone {time.perf_counter() - started:.2f} s"
        )
        instance.dispose()
        engine.dispose()
    finally:
        if not keep:
            server.drop(san)
            server.drop(storage)
    return figures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.explain", description=__doc__)
    parser.add_argument("--server-url", default=DEFAULT_SERVER_URL)
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--per-minute", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--command-runs", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep the databases")
    args = parser.parse_args(argv)
    run(
        args.server_url,
        args.days,
        args.scale,
        args.per_minute,
        args.repeats,
        args.command_runs,
        args.keep,
    )
    return 0


def summary(explained) -> list[str]:
    return [f"{t.asset}: {t.action} x{t.times}" for t in explained.touches]


def make_env(server: Server, storage: str) -> str:
    """DAGSTER_PG_* for the storage database (deploy/dagster.prod.yaml reads them), set in this
    process and inherited by the command's; the SAN database's URL."""
    parsed = make_url(server.url)
    os.environ.update(
        {
            "DAGSTER_PG_HOST": parsed.host or "127.0.0.1",
            "DAGSTER_PG_PORT": str(parsed.port or 5432),
            "DAGSTER_PG_USER": parsed.username or "postgres",
            "DAGSTER_PG_PASSWORD": parsed.password or "unused",
            "DAGSTER_PG_DB": storage,
        }
    )
    return db_url(server.url, server.run_db)


if __name__ == "__main__":
    sys.exit(main())
