"""The SAN sandbox's command line: `python -m san_sandbox COMMAND`.

  init       make an empty database a sandbox (the SAN app's tables, marked san_sandbox)
  seed-demo  make an empty database a sandbox with the small demo SAN state of `make run`
  load       save scraps the way the app does, with the app's faults
  work       run reference workers for a while, with the workers' faults
  age        time travel: shift every timestamp back
  live       a living SAN (scraps arriving, workers failing, the clock running fast)
  ui         `make run`: the Dagster UI, on a living sandbox unless SAN_DATABASE_URL is set
             (`ui --still`: the embedded default without the living sandbox)

The experiments of docs/reliability.md are the benchmark's: `python -m bench.convergence`,
`python -m bench.time_to_heal`.

Every command but `init`, `seed-demo` and `ui` needs a sandbox database
(made by init, or the embedded default); the sandbox refuses a real SAN database.
"""

import argparse
import os
import sys
from datetime import timedelta

from pydantic import ValidationError

from batch_pipeline.san.database import (
    SanConnectionError,
    create_san_engine,
    embedded_database_url,
    redacted,
)
from batch_pipeline.san.dispatch import build_dispatcher
from san_sandbox.app import save_scraps
from san_sandbox.app_schema import NotASandbox, init_sandbox, require_sandbox
from san_sandbox.demo import seed_demo_state
from san_sandbox.faults import Faults, add_fault_flags, faults_from
from san_sandbox.live import LIVE_FAULTS, LiveSettings, run_live
from san_sandbox.pool import WorkerPool, WorkerSettings
from san_sandbox.time_travel import age_database
from san_sandbox.ui import run_ui, say


def build_parser() -> argparse.ArgumentParser:

    parser = argparse.ArgumentParser(
        prog="python -m san_sandbox",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    url_help = (
        "SQLAlchemy URL of the sandbox database (default: SAN_DATABASE_URL, else the embedded "
        "SQLite file)"
    )

    def with_url(name, help):
        sub = commands.add_parser(name, help=help)
        sub.add_argument(
            "--database-url",
            default=os.environ.get("SAN_DATABASE_URL") or embedded_database_url(),
            help=url_help,
        )
        return sub

    with_url("init", "make an empty database a sandbox")
    with_url("seed-demo", "make an empty database a sandbox with the small demo SAN state")
    load = with_url("load", "save scraps the way the app does")
    load.add_argument("--scraps", type=int, default=100)
    load.add_argument("--users", type=int, default=10)
    load.add_argument("--dispatcher", default=os.environ.get("SAN_JOB_DISPATCHER"))
    add_fault_flags(load, Faults())
    work = with_url("work", "run reference workers")
    work.add_argument("--workers", type=int, default=2)
    work.add_argument(
        "--idle-seconds", type=float, default=2.0, help="stop when nothing is heard for this long"
    )
    work.add_argument("--dispatcher", default=os.environ.get("SAN_JOB_DISPATCHER"))
    work.add_argument(
        "--backlog",
        action="store_true",
        help="also take the PENDING jobs that exist already (else only jobs announced from now on)",
    )
    add_fault_flags(work, Faults())
    age = with_url("age", "shift every timestamp back")
    age.add_argument("--hours", type=float, required=True)
    live = with_url("live", "a living SAN, until Ctrl-C")
    live.add_argument("--tick-seconds", type=float, default=2.0)
    live.add_argument("--scraps-per-tick", type=int, default=2)
    live.add_argument("--san-minutes-per-tick", type=float, default=5.0)
    add_fault_flags(live, LIVE_FAULTS)
    ui = commands.add_parser(
        "ui", help="dagster dev, on a living sandbox unless SAN_DATABASE_URL is set"
    )
    ui.add_argument(
        "--still", action="store_true", help="the embedded default without the living sandbox"
    )
    ui.add_argument(
        "dagster_args",
        nargs=argparse.REMAINDER,
        help="after --: arguments for `dagster dev` (default: --host 127.0.0.1 --port 3000)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        faults = faults_from(args) if hasattr(args, "seed") else None
    except ValidationError as error:
        print(f"error: invalid fault setting: {error}", file=sys.stderr)
        return 2
    try:
        return run_command(args, faults)
    except (NotASandbox, SanConnectionError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def run_command(args, faults: Faults | None) -> int:

    if args.command == "ui":
        return run_ui([a for a in args.dagster_args if a != "--"], live=not args.still)
    engine = create_san_engine(args.database_url)
    where = redacted(engine.url)
    if args.command == "seed-demo" or (
        args.command == "live" and args.database_url == embedded_database_url()
    ):
        made = seed_demo_state(engine)  # the embedded default: created and seeded on first use
        if args.command == "seed-demo":
            print(f"{where}: demo state {'seeded: ' + str(made) if made else 'already present'}")
            return 0
    if args.command == "init":
        print(f"{where}: {'now a sandbox' if init_sandbox(engine) else 'already a sandbox'}")
        return 0
    require_sandbox(engine)
    if args.command == "load":
        dispatcher = build_dispatcher(
            args.dispatcher,
            engine.dialect.name,
            os.environ.get("SAN_REDIS_URL", "redis://127.0.0.1:6379/0"),
        )
        report = save_scraps(engine, dispatcher, count=args.scraps, users=args.users, faults=faults)
        print(
            f"{where}: saved {report.scraps} scraps ({report.app_deaths} without jobs, "
            f"{report.poison} poison)"
        )
    elif args.command == "work":
        kind = build_dispatcher(args.dispatcher, engine.dialect.name, "").kind
        settings = WorkerSettings(args.database_url, kind, faults, backlog=args.backlog)
        with WorkerPool(settings, args.workers) as pool:
            stats = pool.drain(idle_s=args.idle_seconds)
        print(f"{where}: {stats.as_dict() | {'lost_job_ids': len(stats.lost_job_ids)}}")
    elif args.command == "age":
        age_database(engine, timedelta(hours=args.hours))
        print(f"{where}: every timestamp moved back {args.hours} h")
    elif args.command == "live":
        say(f"sandbox: a living SAN at {where} (Ctrl-C stops it)")
        run_live(
            engine,
            LiveSettings(
                tick_s=args.tick_seconds,
                scraps_per_tick=args.scraps_per_tick,
                san_minutes_per_tick=args.san_minutes_per_tick,
                faults=faults,
            ),
            report=say,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
