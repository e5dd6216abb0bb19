"""The SAN sandbox's command line: `python -m batch_pipeline.sandbox COMMAND`.

  init       make an empty database a sandbox (the SAN app's tables, marked san_sandbox)
  seed-demo  make an empty database a sandbox with the small demo SAN state of `make run`
  load       save scraps the way the app does, with the app's faults
  work       run reference workers for a while, with the workers' faults
  age        time travel: shift every timestamp back
  converge   the convergence experiment of docs/reliability.md, on a scratch PostgreSQL database
  time-to-heal  the fast lane's experiment of docs/reliability.md: the real daemon, the real clock
  live       a living SAN (scraps arriving, workers failing, the clock running fast)
  ui         `make run`: the Dagster UI, on a living sandbox unless SAN_DATABASE_URL is set
             (`ui --still`: the embedded default without the living sandbox)

Every command but `init`, `seed-demo`, `converge`, `time-to-heal` and `ui` needs a sandbox database
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
from batch_pipeline.sandbox.app import save_scraps
from batch_pipeline.sandbox.app_schema import NotASandbox, init_sandbox, require_sandbox
from batch_pipeline.sandbox.convergence import run_convergence
from batch_pipeline.sandbox.demo import seed_demo_state
from batch_pipeline.sandbox.faults import Faults
from batch_pipeline.sandbox.live import LIVE_FAULTS, LiveSettings, run_live
from batch_pipeline.sandbox.pool import WorkerPool, WorkerSettings
from batch_pipeline.sandbox.scratch import scratch_database
from batch_pipeline.sandbox.time_to_heal import (
    TIME_TO_HEAL_FAULTS,
    WORLDS,
    ExperimentSettings,
    run_experiment,
)
from batch_pipeline.sandbox.time_travel import age_database
from batch_pipeline.sandbox.ui import run_ui, say

FAULT_FLAGS = {
    "event_lost": "--event-lost",
    "app_dies_before_enqueue": "--app-dies",
    "worker_dies_mid_job": "--worker-dies",
    "ai_fails": "--ai-fails",
    "poison": "--poison",
    "slow_worker": "--slow",
}


def add_fault_flags(parser: argparse.ArgumentParser, default: Faults) -> None:
    group = parser.add_argument_group("faults (probabilities, 0..1)")
    for field, flag in FAULT_FLAGS.items():
        group.add_argument(
            flag,
            dest=field,
            type=float,
            default=getattr(default, field),
            help=f"{Faults.model_fields[field].description} (default {getattr(default, field)})",
        )
    group.add_argument("--seed", type=int, default=0, help="same seed, same faults")


def faults_from(args) -> Faults:
    return Faults(
        seed=args.seed,
        reannouncement_lost=getattr(args, "reannouncement_lost", None),
        **{field: getattr(args, field) for field in FAULT_FLAGS},
    )


def build_parser() -> argparse.ArgumentParser:

    parser = argparse.ArgumentParser(
        prog="python -m batch_pipeline.sandbox",
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
    converge = commands.add_parser("converge", help="the convergence experiment (PostgreSQL)")
    converge.add_argument(
        "--server-url",
        default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
        help="a PostgreSQL server; the experiment creates and drops a database of its own there",
    )
    converge.add_argument("--scraps", type=int, default=2_000)
    converge.add_argument("--users", type=int, default=200)
    converge.add_argument("--workers", type=int, default=4)
    converge.add_argument("--max-attempts", type=int, default=20)
    converge.add_argument(
        "--dispatcher", default="pg_notify", choices=["pg_notify", "redis_stream"]
    )
    add_fault_flags(converge, Faults.convergence_rates())
    heal = commands.add_parser(
        "time-to-heal", help="time to heal under the real daemon (PostgreSQL)"
    )
    heal.add_argument(
        "--server-url",
        default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
        help="a PostgreSQL server; the experiment creates and drops a database of its own there",
    )
    heal.add_argument(
        "--save-minutes", type=float, default=10.0, help="how long the app keeps saving scraps"
    )
    heal.add_argument(
        "--deadline-minutes", type=float, default=12.0, help="then at most this long for the heals"
    )
    heal.add_argument("--scraps-per-minute", type=float, default=20.0)
    heal.add_argument(
        "--grace-minutes", type=int, default=2, help="the lane's orphan_min_age_minutes"
    )

    add_fault_flags(heal, TIME_TO_HEAL_FAULTS)
    heal.add_argument(
        "--reannouncement-lost",
        type=float,
        default=TIME_TO_HEAL_FAULTS.reannouncement_lost,
        help="probability that a re-announcement is lost (default 0: the fast lane's NOTIFY "
        "commits with its transaction, only the app's own announcement is ever lost; 0.3: each "
        "drawn afresh)",
    )
    heal.add_argument(
        "--world",
        choices=WORLDS,
        default="default",
        help="default: the faults above; slow-workers: workers busy, claiming 5 s (p50) to 20 s "
        "(p99) after an event; outage: every AI call fails for 10 minutes, then the service "
        "recovers",
    )
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

    if args.command == "converge":
        return converge(args, faults)
    if args.command == "time-to-heal":
        return time_to_heal(args, faults)
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


def converge(args, faults: Faults) -> int:

    with scratch_database(args.server_url) as url:
        result = run_convergence(
            url,
            scraps_to_save=args.scraps,
            users=args.users,
            workers=args.workers,
            faults=faults,
            max_attempts=args.max_attempts,
            dispatcher=args.dispatcher,
            report=say,
        )
    print()
    print(result.table())
    til = result.til
    print(
        f"\nconverged={result.converged} cycles={len(result.cycles)} "
        f"healthy_done={result.healthy_scraps_done}/{result.healthy_scraps} "
        f"max_cards_per_scrap={result.cards_per_scrap_max} "
        f"poison={len(result.poison_scrap_ids)} "
        f"poison_jobs_max={max(result.poison_jobs.values(), default=0)} "
        f"duplicates={max(c.duplicates for c in result.cycles)} "
        f"audit_mismatches={sum(len(c.audit_mismatches) for c in result.cycles)} "
        f"til_users={len(til.active_users)} til_summaries={til.summaries_created} "
        f"til_written={til.written} til_jobs_completed={til.jobs_completed} "
        f"til_ai_failures={til.ai_failures} til_recovered={til.recovered} "
        f"seconds={result.seconds:.0f}"
    )
    return 0 if result.converged else 1


def time_to_heal(args, faults: Faults) -> int:

    faults = faults.model_copy(
        update={"first_attempts_only": TIME_TO_HEAL_FAULTS.first_attempts_only}
    )
    settings = ExperimentSettings(
        save_minutes=args.save_minutes,
        heal_deadline_minutes=args.deadline_minutes,
        scraps_per_minute=args.scraps_per_minute,
        grace_minutes=args.grace_minutes,
        faults=faults,
        world=args.world,
    )
    with scratch_database(args.server_url) as url:
        engine = create_san_engine(url)
        init_sandbox(engine)
        figures = run_experiment(url, engine, settings, report=say)
        engine.dispose()
    print()
    print(figures.report())
    return 0 if all(figures.targets().values()) else 1


if __name__ == "__main__":
    sys.exit(main())
