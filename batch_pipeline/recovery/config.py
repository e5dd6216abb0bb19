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
from batch_pipeline.san.config import WriteConfig


class RecoveryConfig(WriteConfig):
    """Thresholds and caps for one recovery run (in the Launchpad under ops.run_recovery.config)."""

    stale_pending_after_minutes: int = Field(
        default=minutes(STALE_PENDING_AFTER),
        gt=0,
        description="A PENDING job older than this lost its event: ghost.",
    )
    stale_processing_after_minutes: int = Field(
        default=minutes(STALE_PROCESSING_AFTER),
        gt=0,
        description="A PROCESSING job running longer than this (above the AI call timeout): ghost.",
    )
    orphan_min_age_minutes: int = Field(
        default=minutes(ORPHAN_MIN_AGE),
        gt=0,
        description="Grace: scraps and daily summaries younger than this are left alone; the app "
        "may still be enqueueing.",
    )
    scrap_lookback_hours: int = Field(
        default=0,
        ge=0,
        description="Scrap recoveries look only at scraps created in the last N hours "
        "(an index range instead of an anti-join over every scrap). 0 = every scrap (full sweep).",
    )
    max_attempts: int = Field(
        default=MAX_ATTEMPTS,
        ge=0,
        description="Poison cap: a (job_type, target_id) with this many jobs gets no new one. 0 = "
        "unlimited.",
    )
    max_enqueue_per_run: int = Field(
        default=MAX_ENQUEUE_PER_RUN,
        gt=0,
        description="At most this many new jobs per area and run, oldest first; the rest is "
        "deferred.",
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
