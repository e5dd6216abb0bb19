"""One target's story from SAN's database: what it is and has, every job for it, and the verdict
now, from the rules the recoveries run (their SQL: detect_query, is_stale, needs_work; their
constants: the grace, the poison cap, the retry waits, the cadence), never a second copy.

Plain functions over a SQLAlchemy connection; they only read.
"""

from dataclasses import dataclass, field
from datetime import datetime

import pandas as pd
from sqlalchemy import select
from sqlalchemy.engine import Connection

from batch_pipeline.fast_lane.announcements import announcement_ages, claim_stats, threshold_for
from batch_pipeline.fast_lane.config import FastHealConfig
from batch_pipeline.fast_lane.retries import APP_DEATH_CATCH_UP, FAILURE_HORIZON, retry_waits
from batch_pipeline.recovery.cadence import next_run, recovery_cron
from batch_pipeline.recovery.config import RecoveryConfig
from batch_pipeline.recovery.ghost_jobs import GHOST_JOB_RECOVERY, is_stale
from batch_pipeline.recovery.registry import TARGET_RECOVERIES
from batch_pipeline.recovery.targets import TargetRecovery, detect_query
from batch_pipeline.san.durations import in_words
from batch_pipeline.san.frames import frame_instant
from batch_pipeline.san.tables import (
    FAILED,
    FINISHED_STATUSES,
    PENDING,
    PROCESSING,
    daily_summaries,
    jobs,
    knowledge_cards,
    scraps,
)
from batch_pipeline.san.timezone import san_timezone_name
from batch_pipeline.support.touches import JOB, KIND_OF_JOB_TYPE, KIND_OF_TABLE, KINDS
from batch_pipeline.support.wording import age, at, shorten

HEALTHY = "healthy"
WAITING = "waiting on an active job"
NEEDS_WORK = "needs work"
EXHAUSTED = "exhausted"
IN_GRACE = "inside the grace"


class NotFound(LookupError):
    """No such scrap, summary or job in SAN's database."""


@dataclass(frozen=True)
class JobRecord:
    id: int
    job_type: str
    status: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime
    error_message: str | None
    retry_of_job_id: int | None

    @property
    def active(self) -> bool:
        return self.status not in FINISHED_STATUSES  # schema.holds_its_target


@dataclass(frozen=True)
class Verdict:
    area: str
    job_type: str
    state: str
    says: str
    next_at: datetime | None = None  # when something will happen to it, if anything will
    job_id: int | None = None  # the job it waits on


@dataclass
class TargetStory:
    """What SAN's database says of one target, and its verdicts now."""

    kind: str
    id: int
    user_id: int
    created_at: datetime
    facts: dict[str, object]
    jobs: list[JobRecord]
    verdicts: list[Verdict] = field(default_factory=list)
    asked_about_job: int | None = None  # `explain job N`: the job asked about
    now: datetime | None = None


@dataclass(frozen=True)
class Rules:
    """The settings the verdicts follow: the jobs' defaults (their run config's), the cadence."""

    recovery: RecoveryConfig = field(default_factory=RecoveryConfig)
    lane: FastHealConfig = field(default_factory=FastHealConfig)
    cron: str = field(default_factory=recovery_cron)
    timezone: str = field(default_factory=san_timezone_name)


JOB_COLUMNS = (
    jobs.c.id,
    jobs.c.job_type,
    jobs.c.status,
    frame_instant(jobs.c.created_at).label("created_at"),
    frame_instant(jobs.c.started_at).label("started_at"),
    frame_instant(jobs.c.finished_at).label("finished_at"),
    frame_instant(jobs.c.updated_at).label("updated_at"),
    jobs.c.error_message,
    jobs.c.retry_of_job_id,
)
RECOVERIES_OF_KIND = {
    kind: tuple(r for r in TARGET_RECOVERIES if KIND_OF_TABLE[r.table.name] == kind)
    for kind in KIND_OF_TABLE.values()
}


def _instant(value) -> datetime | None:
    if value is None:
        return None
    stamp = pd.Timestamp(value)
    return (stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp).to_pydatetime()


def _facts(conn: Connection, kind: str, target_id: int) -> tuple[int, datetime, dict] | None:
    if kind == "scrap":
        row = conn.execute(
            select(
                scraps.c.user_id,
                frame_instant(scraps.c.created_at).label("created_at"),
                scraps.c.refined_content.is_not(None).label("refined"),
                knowledge_cards.c.id.label("card_id"),
            )
            .select_from(
                scraps.outerjoin(knowledge_cards, knowledge_cards.c.scrap_id == scraps.c.id)
            )
            .where(scraps.c.id == target_id)
        ).first()
        if row is None:
            return None
        return (
            row.user_id,
            _instant(row.created_at),
            {"refined": bool(row.refined), "knowledge_card": row.card_id},
        )
    row = conn.execute(
        select(
            daily_summaries.c.user_id,
            daily_summaries.c.target_date,
            frame_instant(daily_summaries.c.created_at).label("created_at"),
            daily_summaries.c.content.is_not(None).label("content_set"),
        ).where(daily_summaries.c.id == target_id)
    ).first()
    if row is None:
        return None
    target_date = row.target_date
    return (
        row.user_id,
        _instant(row.created_at),
        {
            "target_date": str(target_date) if target_date is not None else None,
            "content_set": bool(row.content_set),
        },
    )


def jobs_of(conn: Connection, kind: str, target_id: int) -> list[JobRecord]:
    job_types = [r.job_type for r in RECOVERIES_OF_KIND[kind]]
    rows = conn.execute(
        select(*JOB_COLUMNS)
        .where(jobs.c.target_id == target_id, jobs.c.job_type.in_(job_types))
        .order_by(jobs.c.id)
    ).all()
    return [
        JobRecord(
            id=row.id,
            job_type=row.job_type,
            status=row.status,
            created_at=_instant(row.created_at),
            started_at=_instant(row.started_at),
            finished_at=_instant(row.finished_at),
            updated_at=_instant(row.updated_at),
            error_message=row.error_message,
            retry_of_job_id=row.retry_of_job_id,
        )
        for row in rows
    ]


def target_of_job(conn: Connection, job_id: int) -> tuple[str, int]:
    row = conn.execute(select(jobs.c.job_type, jobs.c.target_id).where(jobs.c.id == job_id)).first()
    if row is None:
        raise NotFound(f"no job {job_id} in SAN's jobs table")
    kind = KIND_OF_JOB_TYPE.get(row.job_type)
    if kind is None:
        raise NotFound(
            f"job {job_id} is a {row.job_type} job, a type no recovery of batch_pipeline heals "
            f"({', '.join(KIND_OF_JOB_TYPE)})"
        )
    return kind, int(row.target_id)


def read_story(
    conn: Connection, kind: str, target_id: int, now: datetime, rules: Rules = Rules()
) -> TargetStory:
    """The story of `kind` `target_id` ("job": the story of that job's target)."""
    if kind not in KINDS:
        raise NotFound(f"unknown kind {kind!r}: one of {', '.join(KINDS)}")
    asked_about_job = None
    if kind == JOB:
        asked_about_job = target_id
        kind, target_id = target_of_job(conn, target_id)
    found = _facts(conn, kind, target_id)
    if found is None:
        table = "scraps" if kind == "scrap" else "daily_summaries"
        raise NotFound(f"no {kind} {target_id} in SAN's {table} table")
    user_id, created_at, facts = found
    story = TargetStory(
        kind=kind,
        id=target_id,
        user_id=user_id,
        created_at=created_at,
        facts=facts,
        jobs=jobs_of(conn, kind, target_id),
        asked_about_job=asked_about_job,
        now=now,
    )
    stats = claim_stats(conn, now)
    story.verdicts = [
        verdict(conn, recovery, story, now, rules, stats) for recovery in RECOVERIES_OF_KIND[kind]
    ]
    return story


def _active_verdict(conn, recovery, story, job: JobRecord, now, rules, stats) -> Verdict:
    settings = rules.recovery
    rule = GHOST_JOB_RECOVERY.rule(settings, now)
    base = {"area": recovery.area, "job_type": recovery.job_type, "job_id": job.id}
    if job.status not in (PENDING, PROCESSING):
        return Verdict(
            **base,
            state=WAITING,
            says=f"job {job.id} has status {job.status!r}, which batch_pipeline does not know: "
            "it counts as active and is never closed (the unknown_job_statuses check lists it)",
        )
    stale = conn.execute(select(jobs.c.id).where(jobs.c.id == job.id, is_stale(rule))).first()
    next_recovery = next_run(rules.cron, rules.timezone, now)
    if job.status == PENDING:
        since, threshold = job.created_at, settings.stale_pending_after
    else:
        since, threshold = job.started_at or job.updated_at, settings.stale_processing_after
    closes_at = max(since + threshold, job.created_at + rule.shortest_stale_age)
    if stale is not None:
        replaced = (
            "closes it without a replacement (the target is at max_attempts)"
            if settings.max_attempts and len(_of_type(story, recovery)) >= settings.max_attempts
            else "closes it as FAILED and enqueues a replacement"
        )
        return Verdict(
            **base,
            state=WAITING,
            next_at=next_recovery,
            says=f"job {job.id} is a ghost ({job.status} for {age(now - since)}, over "
            f"{in_words(threshold)}): the next recovery_job run, at {at(next_recovery)}, "
            f"{replaced}",
        )
    if job.status == PROCESSING:
        too_young = (
            f", created {age(now - job.created_at)} ago: no job is a ghost before it has "
            f"existed for {in_words(rule.shortest_stale_age)}"
            if closes_at > since + threshold
            else ""
        )
        return Verdict(
            **base,
            state=WAITING,
            next_at=closes_at,
            says=f"waiting on job {job.id} (PROCESSING for {age(now - since)}{too_young}); if it "
            f"is still PROCESSING at {at(closes_at)} the ghost rule closes it",
        )
    ages = announcement_ages(threshold_for(stats.p99), settings.stale_pending_after)
    later = [age for age in ages if job.created_at + age > now]
    again = (
        f"the fast lane announces it again at age {in_words(later[0])}"
        if later and rules.lane.lane_settings().reannounce
        else "no more re-announcements"
    )
    return Verdict(
        **base,
        state=WAITING,
        next_at=closes_at,
        says=f"waiting on job {job.id} (PENDING for {age(now - since)}, not claimed yet); "
        f"{again}, and the ghost rule closes it at {at(closes_at)} if it is still PENDING",
    )


def _of_type(story: TargetStory, recovery: TargetRecovery) -> list[JobRecord]:
    return [job for job in story.jobs if job.job_type == recovery.job_type]


def verdict(
    conn, recovery: TargetRecovery, story: TargetStory, now, rules: Rules, stats
) -> Verdict:
    """What the recovery's rules say of the target now."""
    of_type = _of_type(story, recovery)
    active = [job for job in of_type if job.active]
    if active:
        return _active_verdict(conn, recovery, story, active[-1], now, rules, stats)
    base = {"area": recovery.area, "job_type": recovery.job_type}
    table = recovery.table
    needs_work = conn.execute(
        select(table.c.id).where(table.c.id == story.id, recovery.needs_work)
    ).first()
    if needs_work is None:
        return Verdict(**base, state=HEALTHY, says=f"healthy: {recovery.done_text}")
    settings = rules.recovery
    candidate = recovery.frame.from_rows(
        conn.execute(
            detect_query(
                recovery,
                created_before=now - settings.orphan_min_age,
                among=table.c.id == story.id,
                latest_attempt=True,
            )
        )
    )
    next_recovery = next_run(rules.cron, rules.timezone, now)
    if candidate.empty:
        ends = story.created_at + settings.orphan_min_age
        return Verdict(
            **base,
            state=IN_GRACE,
            next_at=ends,
            says=f"{recovery.needs_work_text.removeprefix('with ')}, no active job, inside the "
            f"grace until {at(ends)} (the app may still enqueue it); healed after that",
        )
    attempts = int(candidate["attempts"].iloc[0])
    waiting_since = candidate["waiting_since"].iloc[0].to_pydatetime()
    if settings.max_attempts and attempts >= settings.max_attempts:
        return _exhausted_verdict(recovery, story, of_type, attempts, settings.max_attempts)
    lane_at = fast_lane_at(recovery, story, now, rules, stats, attempts, waiting_since)
    by_lane = (
        f"the fast lane enqueues it at about {at(lane_at)} (if fast_heal_sensor is running), else "
        if lane_at is not None
        else ""
    )
    tried = (
        f"{attempts} attempt(s) so far, the latest ended {at(waiting_since)}"
        if attempts
        else ("never enqueued")
    )
    return Verdict(
        **base,
        state=NEEDS_WORK,
        next_at=lane_at or next_recovery,
        says=f"needs work ({tried}): {by_lane}the next recovery_job run enqueues it, at "
        f"{at(next_recovery)}",
    )


def _exhausted_verdict(
    recovery: TargetRecovery, story: TargetStory, of_type, attempts: int, max_attempts: int
) -> Verdict:
    failed = [job for job in of_type if job.status == FAILED]
    last = failed[-1] if failed else None
    error = f": {shorten(last.error_message)}" if last and last.error_message else ""
    when = f", the last failed at {at(last.updated_at)}{error}" if last else ""
    return Verdict(
        area=recovery.area,
        job_type=recovery.job_type,
        state=EXHAUSTED,
        says=f"exhausted: {attempts} of max_attempts {max_attempts} jobs{when}. "
        "No recovery gives it another job; after a fix: python -m batch_pipeline redrive "
        f"--area {recovery.area} --ids {story.id} --apply",
    )


def fast_lane_at(
    recovery: TargetRecovery, story: TargetStory, now, rules: Rules, stats, attempts, waiting_since
):
    """When the fast lane would enqueue the target: after its retry's backoff, or the grace of a
    target the app never enqueued; None when the lane leaves it to recovery_job."""
    lane = rules.lane.lane_settings()
    if attempts and waiting_since >= now - FAILURE_HORIZON:
        succeeded = stats.last_success.get(recovery.job_type)
        healthy = pd.Series([succeeded is not None and waiting_since < succeeded])
        wait = retry_waits(
            pd.Series([attempts]), pd.Series([story.id]), healthy, lane.retry_after
        ).iloc[0]
        return max(now, waiting_since + wait.to_pytimedelta())
    if not attempts and story.created_at >= now - lane.grace - APP_DEATH_CATCH_UP:
        return max(now, story.created_at + lane.grace)
    return None
