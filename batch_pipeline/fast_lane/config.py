"""The fast-heal run's config: the lane's rules as defaults (rules.py), validated by pydantic.

Two environment variables change the defaults for the code location (the sensor's probes and
its runs read the same values): SAN_REANNOUNCE=off for workers that do not claim with
compare-and-set, and SAN_FAST_LANE_ORPHAN_MIN_AGE_MINUTES for the lane's grace (default: the
design's orphan_min_age_minutes).
"""

from datetime import datetime, timedelta

from pydantic import Field

from batch_pipeline.fast_lane.rules import (
    MAX_ENQUEUE_PER_TICK,
    REANNOUNCE_AFTER,
    REANNOUNCEMENTS,
    RETRY_AFTER,
    LaneSettings,
    LaneWindow,
)
from batch_pipeline.recovery.ghost_jobs import STALE_PENDING_AFTER
from batch_pipeline.recovery.plan import MAX_ATTEMPTS, RecoveryPolicy, minutes
from batch_pipeline.recovery.targets import ORPHAN_MIN_AGE
from batch_pipeline.san.config import WriteConfig
from batch_pipeline.san.settings import Setting

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
        raise ValueError(
            f"SAN_REANNOUNCE={value!r} must be on or off (off: for workers that do not claim with "
            "compare-and-set, see the README's worker contract)"
        )
    return _SWITCH[value]


def grace_default() -> int:
    return SAN_FAST_LANE_ORPHAN_MIN_AGE_MINUTES.whole_number(
        minutes(ORPHAN_MIN_AGE), low=1, high=MAX_LANE_GRACE_MINUTES
    )


def _instant(value: str | None, name: str) -> datetime | None:
    if value is None:
        return None
    try:
        instant = datetime.fromisoformat(value)
    except ValueError as error:
        raise ValueError(
            f"{name}={value!r} is not an ISO 8601 instant, e.g. 2026-12-01T12:00:00+00:00"
        ) from error
    if instant.tzinfo is None:
        raise ValueError(f"{name}={value!r} has no UTC offset (database time is an instant)")
    return instant


class FastHealConfig(WriteConfig):
    """One fast-heal run (the sensor sets the window; everything else has the lane's defaults)."""

    window_since: str | None = Field(
        default=None,
        description="Start of the re-announcement window (ISO instant, database time), set by "
        "fast_heal_sensor. Unset: 30 s before window_until.",
    )
    window_until: str | None = Field(
        default=None,
        description="End of the window, set by fast_heal_sensor. Unset: the database's now.",
    )
    reannounce: bool = Field(
        default=reannounce_default(),
        description="Announce unclaimed PENDING jobs again (SAN_REANNOUNCE). "
        "Safe only for workers that claim with compare-and-set.",
    )
    reannounce_after_seconds: int = Field(
        default=int(REANNOUNCE_AFTER.total_seconds()),
        gt=0,
        description="First re-announcement of an unclaimed PENDING job at this age; each next one "
        "after twice the wait.",
    )
    reannouncements: int = Field(
        default=REANNOUNCEMENTS,
        ge=0,
        description="At most this many re-announcements per job (before the ghost rule).",
    )
    stale_pending_after_minutes: int = Field(
        default=minutes(STALE_PENDING_AFTER),
        gt=0,
        description="The ghost rule's PENDING threshold: no re-announcement at or after it.",
    )
    retry_after_seconds: int = Field(
        default=int(RETRY_AFTER.total_seconds()),
        gt=0,
        description="Next attempt of a failed target after this, doubling per attempt (at most 2 "
        "h).",
    )
    orphan_min_age_minutes: int = Field(
        default=grace_default(),
        gt=0,
        description="Grace: a target with no job at all is enqueued once it is this old "
        "(SAN_FAST_LANE_ORPHAN_MIN_AGE_MINUTES).",
    )
    max_attempts: int = Field(
        default=MAX_ATTEMPTS,
        ge=0,
        description="Poison cap, as recovery_job's: no new job at this many attempts.",
    )
    max_enqueue_per_tick: int = Field(
        default=MAX_ENQUEUE_PER_TICK,
        gt=0,
        description="At most this many new jobs per area and run, oldest first.",
    )

    def window(self, now: datetime) -> LaneWindow:
        until = _instant(self.window_until, "window_until") or now
        since = _instant(self.window_since, "window_since")
        return LaneWindow.after(since, until)

    def settings(self, announcing: bool = True) -> LaneSettings:
        """The rules' settings; `announcing` False when the dispatcher announces nothing (none)."""
        return LaneSettings(
            reannounce=self.reannounce and announcing,
            reannounce_after=timedelta(seconds=self.reannounce_after_seconds),
            reannouncements=self.reannouncements,
            stale_pending_after=timedelta(minutes=self.stale_pending_after_minutes),
            retry_after=timedelta(seconds=self.retry_after_seconds),
            orphan_min_age=timedelta(minutes=self.orphan_min_age_minutes),
            max_attempts=self.max_attempts,
            max_enqueue_per_tick=self.max_enqueue_per_tick,
            policy=RecoveryPolicy(
                batch_size=self.batch_size, dry_run=self.dry_run, limits=self.write_limits
            ),
        )
