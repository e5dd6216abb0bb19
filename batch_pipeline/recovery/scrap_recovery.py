"""What the two scrap recoveries share: find scraps that still need a job of one type and have
no active job of that type, then enqueue that job for them.

The rules themselves (what "still needs work" means) live in orphan_scraps.py and
unrefined_scraps.py. They stay two recoveries, with their own assets and settings, because
their nature and policy differ (see the design), even though the mechanics are the same.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import pandas as pd
from sqlalchemy import and_, exists, func, select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql.elements import ColumnElement

from batch_pipeline.recovery.plan import RecoveryPolicy, RecoveryReport, plan_recovery
from batch_pipeline.san.dispatch import Dispatcher
from batch_pipeline.san.enqueue import (
    BatchWritten,
    Eligibility,
    EnqueueOutcome,
    EnqueueRequest,
    enqueue_jobs,
    run_in_batches,
)
from batch_pipeline.san.frames import INT, UTC_DATETIME, FrameSchema
from batch_pipeline.san.schema import ACTIVE_STATUSES, jobs, scraps
from batch_pipeline.san.sql import prefer_index_plans

DEFAULT_ORPHAN_MIN_AGE = timedelta(minutes=10)


@dataclass(frozen=True)
class ScrapRecoveryRule:
    area: str  # the asset key of its audit trail
    job_type: str  # the job that does the missing work
    needs_work: ColumnElement  # a condition on `scraps`: the work is still missing
    frame: FrameSchema
    # The same condition as a probe per scrap, for look-back windows, when needs_work is the
    # absence of a row elsewhere: as an anti-join PostgreSQL may hash the whole other table
    # (all 20 M cards at scale 10, 3.4 s) to check the window's few hundred thousand scraps.
    needs_work_per_row: ColumnElement | None = None
    # Indexes whose presence makes the full sweep's index plan the better one, although the
    # planner prices it about even with sequential scans (see prefer_the_indexes).
    full_sweep_prefers: tuple[str, ...] = ()

    @property
    def eligibility(self) -> Eligibility:
        """The write-time re-check: the scrap still needs the work."""
        return Eligibility(scraps, self.needs_work)


def scrap_frame(name: str, description: str) -> FrameSchema:
    return FrameSchema(
        name=name,
        description=description,
        columns={"scrap_id": INT, "user_id": INT, "created_at": UTC_DATETIME, "attempts": INT},
    )


def has_active_job(job_type: str) -> ColumnElement:
    return exists().where(
        jobs.c.job_type == job_type, jobs.c.target_id == scraps.c.id, jobs.c.status.in_(ACTIVE_STATUSES)
    )


def detect_query(rule: ScrapRecoveryRule, created_before: datetime, created_since: datetime | None = None):
    # Scraps with an active job belong to ghost-job recovery: this boundary keeps the two
    # recoveries from handling the same scrap twice. Scraps younger than the grace period may
    # still be being enqueued by the app.
    window = [scraps.c.created_at < created_before]
    needs_work = rule.needs_work
    if created_since is not None:  # a look-back window: an index range instead of a full sweep
        window.append(scraps.c.created_at >= created_since)
        if rule.needs_work_per_row is not None:
            needs_work = rule.needs_work_per_row
    candidates = (
        select(scraps.c.id.label("scrap_id"), scraps.c.user_id, scraps.c.created_at)
        .where(needs_work, ~has_active_job(rule.job_type), *window)
        .cte("candidates")
    )
    attempt = jobs.alias("attempt")
    return (
        select(candidates, func.count(attempt.c.target_id).label("attempts"))
        .select_from(
            candidates.outerjoin(
                attempt, and_(attempt.c.target_id == candidates.c.scrap_id, attempt.c.job_type == rule.job_type)
            )
        )
        .group_by(candidates.c.scrap_id, candidates.c.user_id, candidates.c.created_at)
        .order_by(candidates.c.created_at, candidates.c.scrap_id)
    )


def detect_scraps(
    conn: Connection,
    rule: ScrapRecoveryRule,
    *,
    now: datetime,
    min_age: timedelta = DEFAULT_ORPHAN_MIN_AGE,
    lookback: timedelta | None = None,
) -> pd.DataFrame:
    """Scraps older than `min_age` (and, with a `lookback`, younger than it) that need
    `rule.job_type` and have no active job of that type. Without a look-back this is an
    anti-join over every scrap: see docs/benchmarks.md for its cost at scale."""
    since = now - lookback if lookback else None
    if since is None:
        prefer_index_plans(conn, rule.full_sweep_prefers)  # transaction-local
    return rule.frame.from_rows(conn.execute(detect_query(rule, created_before=now - min_age, created_since=since)))


def enqueue_batch(
    conn: Connection, rule: ScrapRecoveryRule, scrap_ids: Sequence[int], *, now: datetime, max_attempts: int,
    notify_channel: str | None = None,
) -> BatchWritten[EnqueueOutcome]:
    # Re-checked at write time: a worker may have done the work since detection.
    outcome = enqueue_jobs(conn, rule.job_type, [EnqueueRequest(s) for s in scrap_ids], now=now,
                           max_attempts=max_attempts, eligibility=rule.eligibility, notify_channel=notify_channel)
    return BatchWritten(outcome, outcome.created, outcome.announced)


def recover_scraps(
    engine: Engine,
    dispatcher: Dispatcher,
    rule: ScrapRecoveryRule,
    candidates: pd.DataFrame,
    *,
    now: datetime,
    thresholds: dict,
    policy: RecoveryPolicy = RecoveryPolicy(),
) -> RecoveryReport:
    """Enqueue `rule.job_type` for the detected scraps, oldest first, in bounded batches."""
    plan = plan_recovery(candidates, oldest_first_by=["created_at", "scrap_id"], policy=policy)
    report = RecoveryReport(
        area=rule.area,
        dry_run=policy.dry_run,
        thresholds={**thresholds, **policy.caps()},
        detected=len(candidates),
        exhausted=len(plan.exhausted),
        exhausted_ids=plan.exhausted["scrap_id"].tolist(),
        deferred=len(plan.deferred),
        deferred_ids=plan.deferred["scrap_id"].tolist(),
    )
    if policy.dry_run:
        return report

    results, batches = run_in_batches(
        engine, dispatcher, plan.to_enqueue["scrap_id"].tolist(), policy.batch_size,
        lambda conn, scrap_ids: enqueue_batch(conn, rule, scrap_ids, now=now, max_attempts=policy.max_attempts,
                                              notify_channel=dispatcher.statement_channel),
        policy.limits,
    )
    created = [job for outcome in results for job in outcome.created]
    # Reached the cap between detection and write (another run enqueued and it failed since).
    late_exhausted = [target for outcome in results for target in outcome.exhausted]
    report.exhausted += len(late_exhausted)
    report.exhausted_ids += late_exhausted
    report.enqueued = len(created)
    report.skipped_by_race = len(plan.to_enqueue) - len(created) - len(late_exhausted)
    report.recovered = [{"scrap_id": job.target_id, "new_job_id": job.job_id} for job in created]
    report.batches = batches.batches
    report.announce_failures = batches.announce_failures
    return report
