"""The recovery job's run config: the design's thresholds as defaults, validated by pydantic.

Every default is the constant beside its rule (ghost_jobs.py, targets.py, plan.py), so
changing one is a one-line change that the config, the rules, the descriptions and the tests
all follow.
"""

from datetime import timedelta

from pydantic import Field

from batch_pipeline.recovery.ghost_jobs import STALE_PENDING_AFTER, STALE_PROCESSING_AFTER
from batch_pipeline.recovery.plan import MAX_ATTEMPTS, MAX_ENQUEUE_PER_RUN, RecoveryPolicy, minutes
from batch_pipeline.recovery.targets import ORPHAN_MIN_AGE
from batch_pipeline.san.config import (
    MAX_ATTEMPTS_CAP,
    MAX_HOURS,
    MAX_JOBS_PER_RUN,
    MAX_MINUTES,
    WriteConfig,
)


class RecoveryConfig(WriteConfig):
    """Thresholds and caps for one recovery run (in the Launchpad under ops.run_recovery.config)."""

    stale_pending_after_minutes: int = Field(
        default=minutes(STALE_PENDING_AFTER),
        gt=0,
        le=MAX_MINUTES,
        description="A PENDING job older than this (by `created_at`) lost its event: a ghost.",
    )
    stale_processing_after_minutes: int = Field(
        default=minutes(STALE_PROCESSING_AFTER),
        gt=0,
        le=MAX_MINUTES,
        description="A PROCESSING job older than this (by `started_at`, or `updated_at` when "
        "`started_at` is NULL) is above the AI call's timeout ceiling: a ghost. No job is a "
        "ghost before it has existed (by `created_at`) for the shorter of the two thresholds: "
        "that only delays a job whose worker's clock stamped `started_at` before `created_at`, "
        "and lets the rule's reads skip the app's recent churn in the active-jobs index.",
    )
    orphan_min_age_minutes: int = Field(
        default=minutes(ORPHAN_MIN_AGE),
        gt=0,
        le=MAX_MINUTES,
        description="Grace: scraps and daily summaries younger than this are left alone; the app "
        "may still be enqueueing them.",
    )
    scrap_lookback_hours: int = Field(
        default=0,
        ge=0,
        le=MAX_HOURS,
        description="Scrap recoveries look only at scraps created in the last N hours (an index "
        "range instead of an anti-join over every scrap; docs/benchmarks.md). 0 = every scrap.",
    )
    max_attempts: int = Field(
        default=MAX_ATTEMPTS,
        ge=0,
        le=MAX_ATTEMPTS_CAP,
        description="Poison cap: a (job_type, target_id) with this many jobs gets no new one (a "
        "ghost among them is still closed); reported as `exhausted`. 0 = unlimited.",
    )
    max_enqueue_per_run: int = Field(
        default=MAX_ENQUEUE_PER_RUN,
        gt=0,
        le=MAX_JOBS_PER_RUN,
        description="New jobs per area and run, oldest first; the rest is `deferred` to the next "
        "run, so a backlog does not stampede the AI server.",
    )

    @property
    def stale_pending_after(self) -> timedelta:
        return timedelta(minutes=self.stale_pending_after_minutes)

    @property
    def stale_processing_after(self) -> timedelta:
        return timedelta(minutes=self.stale_processing_after_minutes)

    @property
    def orphan_min_age(self) -> timedelta:
        return timedelta(minutes=self.orphan_min_age_minutes)

    @property
    def scrap_lookback(self) -> timedelta | None:
        return timedelta(hours=self.scrap_lookback_hours) if self.scrap_lookback_hours else None

    @property
    def policy(self) -> RecoveryPolicy:
        return RecoveryPolicy(
            max_attempts=self.max_attempts,
            max_enqueue_per_run=self.max_enqueue_per_run,
            batch_size=self.batch_size,
            dry_run=self.dry_run,
            limits=self.write_limits,
        )
