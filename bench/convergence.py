"""Convergence under chaos: does a faulty SAN pipeline heal, cycle after cycle?

Save scraps with the app's faults, then repeat (workers drain, age 2 h, recovery_job) until a
cycle changes nothing; then run a TIL partition and heal its jobs the same way. Every figure is
read back from the database, and each recovery run's audit trail (the materialization metadata
in the Dagster instance) is compared with the rows it really changed.

Used by the test suite (batch_pipeline_tests/bench/test_convergence.py) and by
`python -m bench.convergence` for the larger run in docs/reliability.md.
"""

import argparse
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from dagster import AssetKey, DagsterInstance
from sqlalchemy import and_, exists, func, select, text
from sqlalchemy.engine import Connection, Engine

from batch_pipeline.definitions import defs
from batch_pipeline.recovery import ghost_jobs
from batch_pipeline.recovery.assets import recovery_run_config
from batch_pipeline.recovery.registry import AREAS, RECOVERIES
from batch_pipeline.recovery.targets import has_active_job
from batch_pipeline.recovery.unwritten_tils import UNWRITTEN_TILS
from batch_pipeline.san.database import create_san_engine
from batch_pipeline.san.dispatch import build_dispatcher
from batch_pipeline.san.resources import JobDispatcherResource, SanDatabase
from batch_pipeline.san.tables import (
    ACTIVE_STATUSES,
    CARD_ANALYSIS,
    COMPLETED,
    SCRAP_REFINE,
    TIL_GENERATION,
    daily_summaries,
    jobs,
    knowledge_cards,
    scraps,
)
from batch_pipeline.san.timezone import san_timezone_name
from san_sandbox.app import save_scraps
from san_sandbox.app_schema import init_sandbox
from san_sandbox.faults import Faults, add_fault_flags, faults_from
from san_sandbox.pool import WorkerPool, WorkerSettings
from san_sandbox.scratch import scratch_database
from san_sandbox.time_travel import age_database
from san_sandbox.ui import say
from san_sandbox.worker import WorkerStats

# The areas that enqueue jobs for targets (every recovery but the ghosts, which close and replace).
TARGET_AREAS = tuple(recovery.area for recovery in RECOVERIES if recovery.area != ghost_jobs.AREA)
AGE_PER_CYCLE = timedelta(hours=2)  # the design's recovery period
QUIET_LOGS = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


@dataclass
class CycleFigures:
    cycle: int
    needs_before: int  # unmet (scrap, job type) needs of healthy scraps before the work phase
    needs_without_job: int  # of those, with no job to meet them (the app died)
    expected_after: float  # what the per-attempt failure rate predicts after the work phase
    needs_after: int  # measured after the work phase
    unhealthy_scraps: int  # non-poison scraps lacking refined_content or a card, after the work
    worker: WorkerStats
    ghosts_closed: int = 0
    # area -> jobs the run enqueued there (TARGET_AREAS)
    enqueued: dict = field(default_factory=dict)
    exhausted: dict = field(default_factory=dict)  # area -> ids reported exhausted this run
    duplicates: int = 0  # (job_type, target_id) with two active jobs, worst seen this cycle
    audit_mismatches: list[str] = field(default_factory=list)

    @property
    def changed_nothing(self) -> bool:
        return (
            self.worker.did_nothing and self.ghosts_closed == 0 and not any(self.enqueued.values())
        )


@dataclass
class TilFigures:
    day: date
    active_users: set[int]
    summaries_per_user: dict[int, int]
    summaries_created: int
    written: int  # summaries of the run with their TIL content (what the user gets)
    jobs_completed: int  # of those, with a COMPLETED TIL job (a late result can write it instead)
    cycles: int
    duplicates: int
    ai_failures: int = 0  # TIL_GENERATION attempts the workers ended FAILED
    recovered: int = 0  # TIL_GENERATION jobs til_generation_recovery enqueued
    audit_mismatches: list[str] = field(default_factory=list)


@dataclass
class ConvergenceResult:
    faults: Faults
    scraps: int
    poison_scrap_ids: list[int]
    app_deaths: int
    max_attempts: int
    cycles: list[CycleFigures]
    converged: bool
    healthy_scraps_done: int  # non-poison scraps with refined_content and exactly one card
    healthy_scraps: int
    cards_per_scrap_max: int
    poison_jobs: dict  # (job_type, scrap_id) -> jobs created
    til: TilFigures | None = None
    seconds: float = 0.0

    def summary_line(self) -> str:
        til = self.til
        return (
            f"converged={self.converged} cycles={len(self.cycles)} "
            f"healthy_done={self.healthy_scraps_done}/{self.healthy_scraps} "
            f"max_cards_per_scrap={self.cards_per_scrap_max} "
            f"poison={len(self.poison_scrap_ids)} "
            f"poison_jobs_max={max(self.poison_jobs.values(), default=0)} "
            f"duplicates={max(c.duplicates for c in self.cycles)} "
            f"audit_mismatches={sum(len(c.audit_mismatches) for c in self.cycles)} "
            f"til_users={len(til.active_users)} til_summaries={til.summaries_created} "
            f"til_written={til.written} til_jobs_completed={til.jobs_completed} "
            f"til_ai_failures={til.ai_failures} til_recovered={til.recovered} "
            f"seconds={self.seconds:.0f}"
        )

    def table(self) -> str:
        lines = [
            "| cycle | unmet before | no job | expected after | unmet after | unhealthy scraps | "
            "completed | failed | died | lost | slow | late | ghosts closed | "
            + " | ".join(TARGET_AREAS)
            + " | exhausted | duplicates |",
            "|---:" * (15 + len(TARGET_AREAS)) + "|",
        ]
        for c in self.cycles:
            lines.append(
                f"| {c.cycle} | {c.needs_before} | {c.needs_without_job} | {c.expected_after:.0f} "
                f"| {c.needs_after} | "
                f"{c.unhealthy_scraps} | {c.worker.completed} | {c.worker.failed} | "
                f"{c.worker.died} | "
                f"{c.worker.lost_events} | {c.worker.held_slow} | {c.worker.late_results} | "
                f"{c.ghosts_closed} | "
                + " | ".join(str(c.enqueued.get(area, 0)) for area in TARGET_AREAS)
                + f" | {sum(len(v) for v in c.exhausted.values())} | {c.duplicates} |"
            )
        return "\n".join(lines)


# -- measurements (read back from the database) ----------------------------------------------
def unmet_needs(conn: Connection, poison: set[int]) -> tuple[int, int, int]:
    """(unmet needs, unmet needs with no active job, unhealthy scraps), poison scraps excluded."""
    has_card = exists().where(knowledge_cards.c.scrap_id == scraps.c.id)
    rows = conn.execute(
        select(
            scraps.c.id,
            scraps.c.refined_content.is_(None),
            ~has_card,
            has_active_job(SCRAP_REFINE, scraps),
            has_active_job(CARD_ANALYSIS, scraps),
        ).where((scraps.c.refined_content.is_(None)) | ~has_card)
    ).all()
    needs = without_job = unhealthy = 0
    for scrap_id, needs_refine, needs_card, refine_active, card_active in rows:
        if scrap_id in poison:
            continue
        unhealthy += 1
        needs += bool(needs_refine) + bool(needs_card)
        without_job += (bool(needs_refine) and not refine_active) + (
            bool(needs_card) and not card_active
        )
    return needs, without_job, unhealthy


DUPLICATE_ACTIVE_JOBS = text(
    "SELECT count(*) FROM (SELECT job_type, target_id FROM jobs WHERE status IN ('PENDING', "
    "'PROCESSING') "
    "GROUP BY job_type, target_id HAVING count(*) > 1) AS doubled"
)


def duplicate_active_jobs(engine: Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(DUPLICATE_ACTIVE_JOBS).scalar_one()


def latest_audit(instance: DagsterInstance, area: str) -> dict:
    event = instance.get_latest_materialization_event(AssetKey(area))
    return {k: v.value for k, v in event.asset_materialization.metadata.items()}


def check_audit_against_rows(
    instance, engine: Engine, max_job_id_before: int, active_before: set[int]
) -> tuple[dict, list[str]]:
    """Compare the run's audit trail with the rows that changed; returns (audits, mismatches).

    Counts always: the jobs created are the areas' `enqueued`, the ghosts closed are ghost
    recovery's detected − deferred − skipped_by_race. Ids too, unless the run listed more than
    the audit trail keeps (AUDIT_ID_LIMIT per kind)."""
    audits = {area: latest_audit(instance, area) for area in AREAS}
    with engine.connect() as conn:
        new_ids = set(
            conn.execute(select(jobs.c.id).where(jobs.c.id > max_job_id_before)).scalars()
        )
        still_active = set(
            conn.execute(
                select(jobs.c.id).where(
                    jobs.c.status.in_(ACTIVE_STATUSES), jobs.c.id <= max_job_id_before
                )
            ).scalars()
        )
    closed = active_before - still_active
    ghosts = audits[ghost_jobs.AREA]
    mismatches = []
    enqueued = sum(audits[area]["enqueued"] for area in AREAS)
    if enqueued != len(new_ids):
        mismatches.append(f"new jobs: reported {enqueued}, in the database {len(new_ids)}")
    reported_closed_count = ghosts["detected"] - ghosts["deferred"] - ghosts["skipped_by_race"]
    if reported_closed_count != len(closed):
        mismatches.append(
            f"closed ghosts: reported {reported_closed_count}, in the database {len(closed)}"
        )
    if not any(audits[area]["ids_truncated"] for area in AREAS):
        reported_new = {
            r["new_job_id"]
            for area in AREAS
            for r in audits[area]["recovered"]
            if r["new_job_id"] is not None
        }
        reported_closed = {r["failed_job_id"] for r in ghosts["recovered"]}
        if reported_new != new_ids:
            mismatches.append(f"new job ids differ on {sorted(reported_new ^ new_ids)[:10]}")
        if reported_closed != closed:
            mismatches.append(f"closed ghost ids differ on {sorted(reported_closed ^ closed)[:10]}")
    return audits, mismatches


def job_ids_snapshot(engine: Engine) -> tuple[int, set[int]]:
    with engine.connect() as conn:
        max_id = conn.execute(select(func.coalesce(func.max(jobs.c.id), 0))).scalar_one()
        active = set(
            conn.execute(select(jobs.c.id).where(jobs.c.status.in_(ACTIVE_STATUSES))).scalars()
        )
    return max_id, active


# -- the pipeline, as Dagster runs it --------------------------------------------------------
def run_recovery(url: str, dispatcher: str, instance: DagsterInstance, max_attempts: int):

    result = defs.resolve_job_def("recovery_job").execute_in_process(
        run_config={
            **QUIET_LOGS,
            **recovery_run_config({"max_attempts": max_attempts, "max_enqueue_per_run": 1_000_000}),
        },
        resources={
            "san_database": SanDatabase(url=url),
            "job_dispatcher": JobDispatcherResource(kind=dispatcher),
        },
        instance=instance,
    )
    assert result.success
    return result


def run_til_partition(url: str, dispatcher: str, instance: DagsterInstance, day: date):

    result = defs.resolve_job_def("til_auto_generation_job").execute_in_process(
        partition_key=day.isoformat(),
        run_config=QUIET_LOGS,
        resources={
            "san_database": SanDatabase(url=url),
            "job_dispatcher": JobDispatcherResource(kind=dispatcher),
        },
        instance=instance,
    )
    assert result.success
    return result


# -- the experiment --------------------------------------------------------------------------
def run_convergence(
    url: str,
    *,
    scraps_to_save: int = 2_000,
    users: int = 200,
    workers: int = 4,
    faults: Faults = Faults.convergence_rates(),
    max_attempts: int = 20,
    max_cycles: int = 40,
    dispatcher: str = "pg_notify",
    redis_url: str = "redis://127.0.0.1:6379/0",
    report: Callable[[str], None] = print,
) -> ConvergenceResult:
    started = time.monotonic()
    engine = create_san_engine(url)
    init_sandbox(engine)
    instance = DagsterInstance.ephemeral()
    timezone = san_timezone_name()
    settings = WorkerSettings(url, dispatcher, faults, redis_url, timezone)
    with WorkerPool(settings, workers) as pool:
        load = save_scraps(
            engine,
            build_dispatcher(dispatcher, engine.dialect.name, redis_url),
            count=scraps_to_save,
            users=users,
            faults=faults,
            rng=random.Random(faults.seed),
        )
        poison = set(load.poison_scrap_ids)
        report(
            f"saved {load.scraps} scraps for {users} users: {load.app_deaths} without jobs (app "
            "died), "
            f"{load.poison} poison; attempt failure rate {faults.attempt_failure_rate:.3f}"
        )
        cycles: list[CycleFigures] = []
        converged = False
        for number in range(1, max_cycles + 1):
            with engine.connect() as conn:
                needs_before, without_job, _ = unmet_needs(conn, poison)
            worker_stats = pool.drain()
            with engine.connect() as conn:
                needs_after, _, unhealthy = unmet_needs(conn, poison)
            figures = CycleFigures(
                cycle=number,
                needs_before=needs_before,
                needs_without_job=without_job,
                expected_after=without_job
                + (needs_before - without_job) * faults.attempt_failure_rate,
                needs_after=needs_after,
                unhealthy_scraps=unhealthy,
                worker=worker_stats,
                duplicates=duplicate_active_jobs(engine),
            )
            age_database(engine, AGE_PER_CYCLE)
            max_id, active = job_ids_snapshot(engine)
            run_recovery(url, dispatcher, instance, max_attempts)
            audits, figures.audit_mismatches = check_audit_against_rows(
                instance, engine, max_id, active
            )
            ghosts = audits[ghost_jobs.AREA]
            figures.ghosts_closed = (
                ghosts["detected"] - ghosts["deferred"] - ghosts["skipped_by_race"]
            )
            figures.enqueued = {area: audits[area]["enqueued"] for area in TARGET_AREAS}
            figures.exhausted = {area: list(audits[area]["exhausted_ids"]) for area in AREAS}
            figures.duplicates = max(figures.duplicates, duplicate_active_jobs(engine))
            cycles.append(figures)
            report(
                f"cycle {number:2d}: unmet needs {needs_before:5d} -> {needs_after:5d} "
                f"(expected {figures.expected_after:7.1f}), unhealthy scraps {unhealthy:4d}; "
                "recovery closed "
                f"{figures.ghosts_closed} ghosts, enqueued "
                + ", ".join(f"{figures.enqueued[area]} {area}" for area in TARGET_AREAS)
                + ", exhausted "
                f"{sum(len(v) for v in figures.exhausted.values())}; duplicates "
                f"{figures.duplicates}"
                + (
                    f"; AUDIT MISMATCH {figures.audit_mismatches}"
                    if figures.audit_mismatches
                    else ""
                )
            )
            if figures.changed_nothing:
                converged = True
                break

    result = ConvergenceResult(
        faults=faults,
        scraps=load.scraps,
        poison_scrap_ids=sorted(poison),
        app_deaths=load.app_deaths,
        max_attempts=max_attempts,
        cycles=cycles,
        converged=converged,
        **final_state(engine, poison),
    )
    result.til = heal_til_day(
        url,
        engine,
        dispatcher,
        instance,
        faults,
        workers,
        redis_url,
        timezone,
        max_attempts,
        report,
    )
    result.seconds = time.monotonic() - started
    engine.dispose()
    return result


def final_state(engine: Engine, poison: set[int]) -> dict:
    with engine.connect() as conn:
        cards = dict(
            conn.execute(
                select(knowledge_cards.c.scrap_id, func.count()).group_by(
                    knowledge_cards.c.scrap_id
                )
            )
            .tuples()
            .all()
        )
        refined = set(
            conn.execute(select(scraps.c.id).where(scraps.c.refined_content.is_not(None))).scalars()
        )
        all_ids = set(conn.execute(select(scraps.c.id)).scalars())
        poison_jobs = dict(
            ((job_type, target), count)
            for job_type, target, count in conn.execute(
                select(jobs.c.job_type, jobs.c.target_id, func.count())
                .where(
                    jobs.c.target_id.in_(sorted(poison) or [-1]),
                    jobs.c.job_type.in_([SCRAP_REFINE, CARD_ANALYSIS]),
                )
                .group_by(jobs.c.job_type, jobs.c.target_id)
            )
            .tuples()
            .all()
        )
    healthy = all_ids - poison
    return {
        "healthy_scraps": len(healthy),
        "healthy_scraps_done": sum(1 for s in healthy if s in refined and cards.get(s) == 1),
        "cards_per_scrap_max": max(cards.values(), default=0),
        "poison_jobs": poison_jobs,
    }


def til_job_in_flight():
    return has_active_job(TIL_GENERATION, daily_summaries)


def til_job_completed():
    return exists().where(
        and_(
            jobs.c.target_id == daily_summaries.c.id,
            jobs.c.job_type == TIL_GENERATION,
            jobs.c.status == COMPLETED,
        )
    )


def busiest_day(engine: Engine, timezone: str) -> tuple[date, set[int]]:
    """The local day holding most scraps, and its active users (a card for a scrap of that day),
    computed here in Python, independently of the pipeline's own query."""
    zone = ZoneInfo(timezone)
    with engine.connect() as conn:
        rows = conn.execute(
            select(scraps.c.user_id, scraps.c.created_at, knowledge_cards.c.id).select_from(
                scraps.outerjoin(knowledge_cards, knowledge_cards.c.scrap_id == scraps.c.id)
            )
        ).all()
    by_day: dict[date, list] = {}
    for user_id, created_at, card_id in rows:
        if created_at.tzinfo is None:  # SQLite hands back naive UTC
            created_at = created_at.replace(tzinfo=ZoneInfo("UTC"))
        by_day.setdefault(created_at.astimezone(zone).date(), []).append((user_id, card_id))
    day = max(by_day, key=lambda d: len(by_day[d]))
    return day, {user_id for user_id, card_id in by_day[day] if card_id is not None}


def heal_til_day(
    url,
    engine,
    dispatcher,
    instance,
    faults,
    workers,
    redis_url,
    timezone,
    max_attempts,
    report,
    max_cycles: int = 20,
) -> TilFigures:
    """Run the TIL partition of the busiest day, then (work, age, recovery) until every summary of
    the run has its content and no job in flight. The TIL phase keeps every worker fault of the
    scrap phase, AI failures included: a FAILED TIL_GENERATION job is healed by
    til_generation_recovery, a lost event or a dead or slow worker by ghost-job recovery. No poison:
    a summary's TIL is never refused by the AI for good in this experiment."""
    day, active_users = busiest_day(engine, timezone)
    today = datetime.now(ZoneInfo(timezone)).date()
    if day >= today:  # a short run: the TIL partition of a day that is not over yet does not exist
        age_database(engine, timedelta(days=(day - today).days + 1))
        day, active_users = busiest_day(engine, timezone)
    til_faults = faults.model_copy(update={"poison": 0.0})
    with engine.connect() as conn:
        before = conn.execute(select(func.coalesce(func.max(daily_summaries.c.id), 0))).scalar_one()
    settings = WorkerSettings(url, dispatcher, til_faults, redis_url, timezone)
    figures = TilFigures(
        day=day,
        active_users=active_users,
        summaries_per_user={},
        summaries_created=0,
        written=0,
        jobs_completed=0,
        cycles=0,
        duplicates=0,
    )
    with WorkerPool(settings, workers) as pool:
        run_til_partition(url, dispatcher, instance, day)
        for figures.cycles in range(1, max_cycles + 1):
            figures.ai_failures += pool.drain().failed
            with engine.connect() as conn:
                missing = conn.execute(
                    select(func.count())
                    .select_from(daily_summaries)
                    .where(
                        daily_summaries.c.id > before,
                        daily_summaries.c.content.is_(None) | til_job_in_flight(),
                    )
                ).scalar_one()
            figures.duplicates = max(figures.duplicates, duplicate_active_jobs(engine))
            report(
                f"TIL {day}: cycle {figures.cycles}, summaries without content or with a job in "
                f"flight: {missing}"
            )
            if not missing:
                break
            age_database(engine, AGE_PER_CYCLE)
            max_id, active = job_ids_snapshot(engine)
            run_recovery(url, dispatcher, instance, max_attempts)
            audits, mismatches = check_audit_against_rows(instance, engine, max_id, active)
            figures.audit_mismatches += mismatches
            figures.recovered += audits[UNWRITTEN_TILS.area]["enqueued"]
    with engine.connect() as conn:
        summaries = conn.execute(
            select(
                daily_summaries.c.id, daily_summaries.c.user_id, daily_summaries.c.content
            ).where(daily_summaries.c.id > before)
        ).all()
        completed_targets = set(
            conn.execute(
                select(daily_summaries.c.id).where(
                    daily_summaries.c.id > before, til_job_completed()
                )
            ).scalars()
        )
    for _id, user_id, _content in summaries:
        figures.summaries_per_user[user_id] = figures.summaries_per_user.get(user_id, 0) + 1
    figures.summaries_created = len(summaries)
    figures.written = sum(1 for s in summaries if s.content)
    # A slow worker's late result can write the TIL after recovery replaced its job, and the
    # replacement may then fail at the AI: the user has the TIL, the job history ends FAILED.
    figures.jobs_completed = sum(1 for s in summaries if s.id in completed_targets and s.content)
    return figures


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.convergence",
        description="The convergence experiment of docs/reliability.md, on a scratch PostgreSQL "
        "database it creates and drops.",
    )
    parser.add_argument(
        "--server-url",
        default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
        help="a PostgreSQL server; the experiment creates and drops a database of its own there",
    )
    parser.add_argument("--scraps", type=int, default=2_000)
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--max-attempts", type=int, default=20)
    parser.add_argument("--dispatcher", default="pg_notify", choices=["pg_notify", "redis_stream"])
    add_fault_flags(parser, Faults.convergence_rates())
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    faults = faults_from(args)
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
    print()
    print(result.summary_line())
    return 0 if result.converged else 1


if __name__ == "__main__":
    sys.exit(main())
