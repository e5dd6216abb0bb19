"""Failed AI calls and app deaths: a target of a recovery of the registry that still lacks its
result, with no active job, gets its next attempt soon after its latest one failed, or its first
right after the grace if the app never enqueued it. Through recovery_job's own enqueue path
(the guards, the poison cap, the write-time re-check).

The wait after a failure is a bounded, jittered backoff: RETRY_AFTER, doubling with each attempt,
up to RETRY_BACKOFF_CEILING (the recovery cadence: recovery_job takes whatever waits longer
anyway), each wait up to RETRY_JITTER longer, drawn per target and attempt. While the AI service
keeps failing, that is all: it is not hammered. Once a job of the same type has succeeded since
the target's failure, the service works again, and the wait is at most HEALTHY_RETRY_CEILING:
after an outage everything waiting heals within about a minute, not at the end of a long
backoff. The poison cap (max_attempts) bounds the attempts either way.

A dead worker's PROCESSING job stays on the design's 60-minute rule: SAN's workers send no
heartbeat, and the rule is the AI call's timeout ceiling.

Plain functions over a SQLAlchemy connection; assets.py runs them in fast_heal_job.
"""

from collections.abc import Mapping
from datetime import datetime, timedelta

import numpy as np
import pandas as pd
from sqlalchemy import select
from sqlalchemy.engine import Connection, Engine

from batch_pipeline.recovery.cadence import RECOVERY_PERIOD
from batch_pipeline.recovery.plan import RecoveryPolicy, RecoveryReport, heal_age_metadata
from batch_pipeline.recovery.target_writes import recover_targets
from batch_pipeline.recovery.targets import TargetRecovery, detect_query
from batch_pipeline.san.audit import AUDIT_ID_LIMIT, capped_ids
from batch_pipeline.san.dialects import dialect
from batch_pipeline.san.dispatch import Dispatcher
from batch_pipeline.san.tables import FAILED, jobs

# The first retry this long after the failure; each next wait RETRY_GROWTH times the one before.
RETRY_AFTER = timedelta(seconds=5)
RETRY_GROWTH = 2
# Each wait is up to this share longer, drawn per (target, attempt): a batch of targets that
# failed together does not retry together.
RETRY_JITTER = 0.25
# While the AI service keeps failing: at most the recovery cadence.
RETRY_BACKOFF_CEILING = RECOVERY_PERIOD
# Once a job of the same type has succeeded since the target's failure: at most this.
HEALTHY_RETRY_CEILING = timedelta(minutes=1)
# Failures older than this are recovery_job's (the ceiling, plus a run's length).
FAILURE_HORIZON = RETRY_BACKOFF_CEILING + timedelta(hours=1)
# App deaths: targets past the grace by at most this are the lane's; older ones recovery_job's.
APP_DEATH_CATCH_UP = timedelta(minutes=30)
# New jobs per recovery area and run, oldest first: a storm after an outage stays bounded.
MAX_ENQUEUE_PER_TICK = 500


def jitter(targets: pd.Series, attempts: pd.Series) -> pd.Series:
    """A factor in [1, 1 + RETRY_JITTER), the same for a (target, attempt) whoever computes it
    (the sensor's probe and the run it requests agree on what is due)."""
    mixed = targets.astype("uint64") * np.uint64(2654435761) + attempts.astype(
        "uint64"
    ) * np.uint64(40503)
    return 1 + RETRY_JITTER * (mixed % np.uint64(1000)).astype("float64") / 1000


def retry_waits(
    attempts: pd.Series,
    targets: pd.Series,
    healthy: pd.Series,
    first: timedelta = RETRY_AFTER,
    ceiling: timedelta = RETRY_BACKOFF_CEILING,
    healthy_ceiling: timedelta = HEALTHY_RETRY_CEILING,
) -> pd.Series:
    """The wait after the latest failure before attempt `attempts + 1`: first x growth^(attempts-1)
    x jitter, at most `ceiling`, and at most `healthy_ceiling` where `healthy`."""
    doublings = (attempts.clip(lower=1) - 1).clip(upper=40).astype("float64")
    seconds = first.total_seconds() * RETRY_GROWTH**doublings * jitter(targets, attempts)
    seconds = seconds.clip(upper=ceiling.total_seconds())
    seconds = seconds.where(
        ~healthy.astype(bool), seconds.clip(upper=healthy_ceiling.total_seconds())
    )
    return pd.to_timedelta(seconds, unit="s")


def recent_failures(recovery: TargetRecovery, now: datetime):
    """Targets with a failed attempt of the recovery's job type inside the horizon: an index
    range over ix_san_jobs_failed_updated."""
    return select(jobs.c.target_id).where(
        jobs.c.status == FAILED,
        jobs.c.updated_at >= now - FAILURE_HORIZON,
        jobs.c.job_type == recovery.job_type,
    )


def failed_targets_query(conn: Connection, recovery: TargetRecovery, now: datetime):
    """The detection of the recovery's targets among those with a recent failure. The failed
    ids are read first (a range of ix_san_jobs_failed_updated) and then probed by id: as one
    semi-join, PostgreSQL read the recovery's whole partial index (docs/benchmarks.md, "The fast
    lane's probe")."""
    failed_ids = list(conn.execute(recent_failures(recovery, now).distinct()).scalars())
    return detect_query(
        recovery,
        created_before=now,
        among=dialect(conn).id_in(recovery.table.c.id, failed_ids),
        latest_attempt=True,
    )


def unqueued_query(recovery: TargetRecovery, now: datetime, grace: timedelta):
    """Targets past the grace by at most APP_DEATH_CATCH_UP that need the work (their attempts
    counted: those with none were never enqueued)."""
    grace_ends = now - grace
    return detect_query(
        recovery, created_before=grace_ends, created_since=grace_ends - APP_DEATH_CATCH_UP
    )


def due_retries(
    conn: Connection,
    recovery: TargetRecovery,
    now: datetime,
    *,
    grace: timedelta,
    max_attempts: int,
    last_success: Mapping[str, datetime],
    retry_after: timedelta = RETRY_AFTER,
) -> pd.DataFrame:
    """The recovery's targets the lane heals now, oldest wait first, in the recovery's frame:
    - failed: latest attempt ended, still needs the work, no active job, under max_attempts,
      and its wait since the latest attempt has passed (`last_success`: when a job of each type
      last succeeded, see retry_waits);
    - never enqueued: past the grace by at most APP_DEATH_CATCH_UP, with no job at all."""
    failed = recovery.frame.from_rows(conn.execute(failed_targets_query(conn, recovery, now)))
    failed = failed[failed["attempts"] > 0]
    if max_attempts:
        failed = failed[failed["attempts"] < max_attempts]
    succeeded = last_success.get(recovery.job_type)
    healthy = (
        failed["waiting_since"] < pd.Timestamp(succeeded)
        if succeeded is not None
        else pd.Series(False, index=failed.index)
    )
    waits = retry_waits(failed["attempts"], failed[recovery.id_key], healthy, retry_after)
    failed = failed[failed["waiting_since"] + waits <= pd.Timestamp(now)]
    unqueued = recovery.frame.from_rows(conn.execute(unqueued_query(recovery, now, grace)))
    unqueued = unqueued[unqueued["attempts"] == 0]
    due = pd.concat([failed, unqueued]).drop_duplicates(subset=[recovery.id_key])
    return due.sort_values(["waiting_since", recovery.id_key], kind="stable").reset_index(drop=True)


def retry(
    engine: Engine,
    dispatcher: Dispatcher,
    recovery: TargetRecovery,
    due: pd.DataFrame,
    now: datetime,
    policy: RecoveryPolicy,
    thresholds: dict,
) -> RecoveryReport:
    """Enqueue the due targets through recovery_job's own path (guards, poison cap, re-check);
    `policy.max_enqueue_per_run` is the lane's cap per run."""
    return recover_targets(
        engine, dispatcher, recovery, due, now=now, policy=policy, thresholds=thresholds
    )


def retries_metadata(reports: list[RecoveryReport]) -> dict:
    """One audit entry for the lane's retries of every area: totals (plotted), per-area counts, the
    target -> new job pairs (each tagged with its area) and the time the healed targets waited."""
    counts = (
        "detected",
        "enqueued",
        "exhausted",
        "deferred",
        "skipped_by_race",
        "announce_failures",
    )
    return {
        **{name: sum(getattr(report, name) for report in reports) for name in counts},
        **heal_age_metadata([age for report in reports for age in report.heal_ages_seconds]),
        "by_area": {
            report.area: {name: getattr(report, name) for name in counts} for report in reports
        },
        **capped_ids(
            recovered=[
                {"area": report.area, **pair} for report in reports for pair in report.recovered
            ],
        ),
        "skipped_by_race_ids": {
            report.area: report.skipped_by_race_ids[:AUDIT_ID_LIMIT]
            for report in reports
            if report.skipped_by_race_ids
        },
        **(
            {"earlier_attempts": max(report.earlier_attempts for report in reports)}
            if any(report.earlier_attempts for report in reports)
            else {}
        ),
        "thresholds": reports[0].thresholds if reports else {},
    }
