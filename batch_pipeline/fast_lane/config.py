"""The fast lane's settings: fast_heal_job's run config (the retries), validated by pydantic, and
the two environment variables that change the defaults for the whole code location (the
sensor's ticks and the runs it requests read the same values): SAN_REANNOUNCE=off for workers
that do not claim with compare-and-set, and SAN_FAST_LANE_ORPHAN_MIN_AGE_MINUTES for the lane's
grace (default: the design's orphan_min_age_minutes)."""

from datetime import timedelta

from pydantic import Field

from batch_pipeline.fast_lane.retries import (
    HEALTHY_RETRY_CEILING,
    MAX_ENQUEUE_PER_TICK,
    RETRY_AFTER,
    RETRY_BACKOFF_CEILING,
    RETRY_GROWTH,
)
from batch_pipeline.fast_lane.tick import LaneSettings
from batch_pipeline.recovery.plan import MAX_ATTEMPTS, RecoveryPolicy, minutes
from batch_pipeline.recovery.targets import ORPHAN_MIN_AGE
from batch_pipeline.san.config import MAX_ATTEMPTS_CAP, MAX_JOBS_PER_RUN, WriteConfig
from batch_pipeline.san.durations import in_words
from batch_pipeline.san.settings import Setting, SettingError

_SWITCH = {
    "on": True,
    "true": True,
    "1": True,
    "yes": True,
    "off": False,
    "false": False,
    "0": False,
    "no": False,
}

SAN_REANNOUNCE = Setting(
    "SAN_REANNOUNCE",
    "on",
    "`off`: the fast lane never re-announces (for workers that do not claim with "
    "compare-and-set); it still retries failed targets and enqueues what the app never did. "
    "Anything but on/off is an error at load",
)
# The lane's grace for a target with no job at all; a whole day is the most it makes sense to wait
MAX_LANE_GRACE_MINUTES = 24 * 60
SAN_FAST_LANE_ORPHAN_MIN_AGE_MINUTES = Setting(
    "SAN_FAST_LANE_ORPHAN_MIN_AGE_MINUTES",
    f"{minutes(ORPHAN_MIN_AGE)} (the design's grace)",
    "the fast lane's grace before it enqueues a target with no job at all (a whole number from 1 "
    f"to {MAX_LANE_GRACE_MINUTES})",
)


def reannounce_default() -> bool:
    value = (SAN_REANNOUNCE.raw() or "on").lower()
    if value not in _SWITCH:
        raise SettingError(
            f"SAN_REANNOUNCE={value!r} must be on or off (off: for workers that do not claim with "
            "compare-and-set, see the worker contract in docs/correctness.md)"
        )
    return _SWITCH[value]


def grace_default() -> int:
    return SAN_FAST_LANE_ORPHAN_MIN_AGE_MINUTES.whole_number(
        minutes(ORPHAN_MIN_AGE), low=1, high=MAX_LANE_GRACE_MINUTES
    )


class FastHealConfig(WriteConfig):
    """One fast_heal_job run: the targets whose retry is due, and those the app never enqueued."""

    retry_after_seconds: int = Field(
        default=int(RETRY_AFTER.total_seconds()),
        gt=0,
        le=int(RETRY_BACKOFF_CEILING.total_seconds()),
        description=f"A failed target's next attempt this long after its failure, x"
        f"{RETRY_GROWTH} with each attempt (+ up to 25 % jitter), at most "
        f"{in_words(RETRY_BACKOFF_CEILING)}; at most {in_words(HEALTHY_RETRY_CEILING)} once a "
        "job of the same type has succeeded since the failure.",
    )
    orphan_min_age_minutes: int = Field(
        default=grace_default(),
        gt=0,
        le=MAX_LANE_GRACE_MINUTES,
        description="Grace: a target with no job at all is enqueued once it is this old "
        "(SAN_FAST_LANE_ORPHAN_MIN_AGE_MINUTES).",
    )
    max_attempts: int = Field(
        default=MAX_ATTEMPTS,
        ge=0,
        le=MAX_ATTEMPTS_CAP,
        description="Poison cap, as recovery_job's: no new job at this many attempts.",
    )
    max_enqueue_per_tick: int = Field(
        default=MAX_ENQUEUE_PER_TICK,
        gt=0,
        le=MAX_JOBS_PER_RUN,
        description="At most this many new jobs per area and run, oldest first (the rest: the "
        "next runs).",
    )

    def lane_settings(self) -> LaneSettings:
        return LaneSettings(
            reannounce=reannounce_default(),
            retry_after=timedelta(seconds=self.retry_after_seconds),
            grace=timedelta(minutes=self.orphan_min_age_minutes),
            max_attempts=self.max_attempts,
            max_enqueue=self.max_enqueue_per_tick,
        )

    @property
    def policy(self) -> RecoveryPolicy:
        """The retries' policy: the poison cap, the cap per run, batches, dry run, bounds."""
        return RecoveryPolicy(
            max_attempts=self.max_attempts,
            max_enqueue_per_run=self.max_enqueue_per_tick,
            batch_size=self.batch_size,
            dry_run=self.dry_run,
            limits=self.write_limits,
        )
