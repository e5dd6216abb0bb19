"""The support jobs' run config, validated by pydantic: explain_job takes a target, redrive_job
an area and a filter (a dry run unless `dry_run: false`)."""

from datetime import UTC, datetime
from enum import Enum

from dagster import Config
from pydantic import Field, field_validator

from batch_pipeline.recovery.plan import MAX_ATTEMPTS
from batch_pipeline.recovery.registry import TARGET_RECOVERIES
from batch_pipeline.san.config import MAX_ATTEMPTS_CAP, MAX_JOBS_PER_RUN, WriteConfig
from batch_pipeline.san.tables import MAX_ID
from batch_pipeline.support.redrive import DEFAULT_LIMIT, RedriveFilter
from batch_pipeline.support.touches import KINDS

# The Launchpad offers these as a choice.
TargetKind = Enum("TargetKind", {kind: kind for kind in KINDS})
RedriveArea = Enum("RedriveArea", {r.area: r.area for r in TARGET_RECOVERIES})


class ExplainConfig(Config):
    """Which target to explain (in the Launchpad under ops.explain_target.config)."""

    # Defaults so the Launchpad opens with valid config to edit (not "Missing required config").
    kind: TargetKind = Field(
        default=TargetKind.scrap, description="scrap, summary, or job (a job: its target's story)."
    )
    id: int = Field(
        default=1, gt=0, le=MAX_ID, description="The id in SAN's scraps, daily_summaries or jobs."
    )


def parse_instant(value: str, name: str) -> datetime | None:
    """An ISO 8601 date or date-time (UTC unless it says otherwise); "" = none."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"{name}={value!r} is not an ISO 8601 date or date-time (e.g. 2026-12-01 or "
            "2026-12-01T09:00:00+09:00)"
        ) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


class RedriveConfig(WriteConfig):
    """Which exhausted targets get one more job (in the Launchpad under ops.redrive.config)."""

    # A default so the Launchpad opens valid: a dry run over the first area's exhausted targets.
    area: RedriveArea = Field(
        default=RedriveArea[TARGET_RECOVERIES[0].area],
        description="The recovery whose exhausted targets to redrive.",
    )
    target_ids: list[int] = Field(
        default=[], description="Only these targets (empty: every exhausted target of the area)."
    )
    failed_since: str = Field(
        default="",
        description="Only targets whose latest failure is at or after this ISO 8601 date or "
        "date-time (UTC unless it says otherwise); empty: any time.",
    )
    error_message_contains: str = Field(
        default="",
        description="Only targets whose latest failure's error message contains this (any case).",
    )
    limit: int = Field(
        default=DEFAULT_LIMIT,
        gt=0,
        le=MAX_JOBS_PER_RUN,
        description="At most this many targets, oldest latest failure first; the rest are "
        "counted (over_limit).",
    )
    max_attempts: int = Field(
        default=MAX_ATTEMPTS,
        gt=0,
        le=MAX_ATTEMPTS_CAP,
        description="The poison cap the targets reached (recovery_job's max_attempts).",
    )
    reason: str = Field(default="", description="Why, for the audit trail (e.g. the fix).")
    dry_run: bool = Field(
        default=True,
        description="List what would be redriven (an observation); `false` enqueues.",
    )

    @field_validator("failed_since")
    @classmethod
    def _is_an_instant(cls, value: str) -> str:
        parse_instant(value, "failed_since")
        return value

    @field_validator("target_ids")
    @classmethod
    def _are_ids(cls, value: list[int]) -> list[int]:
        bad = [i for i in value if not 0 < i <= MAX_ID]
        if bad:
            raise ValueError(f"target_ids must be ids from 1 to {MAX_ID}; got {bad[:5]}")
        return value

    @property
    def chosen(self) -> RedriveFilter:
        return RedriveFilter(
            target_ids=tuple(self.target_ids),
            failed_since=parse_instant(self.failed_since, "failed_since"),
            error_message_contains=self.error_message_contains or None,
            limit=self.limit,
        )
