"""A living SAN for the UI (`make run`): users keep saving scraps, a worker keeps working and
failing, and the clock runs fast, so recoveries and TILs always have real work to show.

Each tick: a few scraps are saved (with the app's faults), the worker handles what it hears (with
the worker's faults), and the database is aged by `san_minutes_per_tick`. With the defaults (a
2 s tick, 5 SAN minutes per tick) a lost event becomes a ghost within 15 s, and a SAN day passes
in under 10 minutes, so yesterday's TIL partition has users soon after start.
"""

import random
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.engine import Engine

from batch_pipeline.san.dispatch import build_dispatcher
from san_sandbox.app import save_scraps
from san_sandbox.app_schema import require_sandbox
from san_sandbox.events import open_job_events
from san_sandbox.faults import Faults
from san_sandbox.time_travel import age_database
from san_sandbox.worker import ReferenceWorker, WorkerStats

# recovery_schedule beside the living sandbox: every real minute, 2.5 hours of the sandbox's
# clock (5 SAN minutes per 2 s): the design's 2-hourly cadence in the sandbox's own time, so
# ghosts never pile up past twice their threshold between runs and ghost_backlog agrees.
LIVE_RECOVERY_CRON = "* * * * *"

LIVE_FAULTS = Faults(
    event_lost=0.10,
    app_dies_before_enqueue=0.05,
    worker_dies_mid_job=0.05,
    ai_fails=0.10,
    poison=0.01,
    slow_worker=0.03,
)


@dataclass(frozen=True)
class LiveSettings:
    tick_s: float = 2.0
    scraps_per_tick: int = 2
    users: int = 20
    san_minutes_per_tick: float = 5.0
    faults: Faults = LIVE_FAULTS
    dispatcher: str | None = None  # default: pg_notify on PostgreSQL, none (polling) on SQLite
    redis_url: str = "redis://127.0.0.1:6379/0"


def run_live(
    engine: Engine,
    settings: LiveSettings = LiveSettings(),
    ticks: int | None = None,
    report=print,
    report_every: int = 30,
) -> WorkerStats:
    """Run until interrupted (or for `ticks` ticks); returns what the worker did."""
    require_sandbox(engine)
    dispatcher = build_dispatcher(settings.dispatcher, engine.dialect.name, settings.redis_url)
    events = open_job_events(
        dispatcher.kind, engine, redis_url=settings.redis_url, consumer="live-worker"
    )
    worker = ReferenceWorker(engine, events, settings.faults)
    rng = random.Random(settings.faults.seed)
    total, saved, tick = WorkerStats(), 0, 0
    try:
        while ticks is None or tick < ticks:
            tick += 1
            saved += save_scraps(
                engine,
                dispatcher,
                count=settings.scraps_per_tick,
                users=settings.users,
                faults=settings.faults,
                rng=rng,
            ).scraps
            worker.stats = WorkerStats()
            # a slow job finishes 75 SAN minutes after its claim: past the 1 h PROCESSING
            # threshold, so a recovery run in between replaces it and its result lands late
            worker.run_for(
                settings.tick_s, slow_delay_s=settings.tick_s * 75 / settings.san_minutes_per_tick
            )
            total.add(worker.stats)
            age_database(engine, timedelta(minutes=settings.san_minutes_per_tick))
            if tick % report_every == 0:
                report(
                    f"sandbox: {saved} scraps saved; worker completed {total.completed}, failed "
                    f"{total.failed}, died {total.died}, lost events {total.lost_events}, late "
                    "results "
                    f"{total.late_results}"
                )
    except KeyboardInterrupt:
        pass
    finally:
        events.close()
    return total
