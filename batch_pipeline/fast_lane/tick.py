"""One tick of the fast lane, as a plain function (sensors.py runs it every PROBE_INTERVAL):
re-estimate how fast SAN's workers claim (every ESTIMATE_EVERY), announce again the jobs whose
age crossed a step inside the window (announcements.py), and count the targets a fast_heal_job
run would retry or enqueue (retries.py). The lane's only state is a `LaneState`: the sensor's
cursor."""

import json
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from sqlalchemy.engine import Engine

from batch_pipeline.fast_lane.announcements import (
    ESTIMATE_EVERY,
    MAX_ANNOUNCEMENTS_PER_TICK,
    REANNOUNCE_FLOOR,
    AnnounceReport,
    ClaimStats,
    LaneWindow,
    announcement_ages,
    claim_stats,
    due_after,
    due_announcements,
    reannounce,
    threshold_for,
)
from batch_pipeline.fast_lane.retries import MAX_ENQUEUE_PER_TICK, RETRY_AFTER, due_retries
from batch_pipeline.recovery.ghost_jobs import STALE_PENDING_AFTER
from batch_pipeline.recovery.plan import MAX_ATTEMPTS
from batch_pipeline.recovery.targets import ORPHAN_MIN_AGE
from batch_pipeline.san.database import database_now, read_transaction
from batch_pipeline.san.dispatch import Dispatcher
from batch_pipeline.san.limits import WriteLimits

# How often the sensor ticks: Dagster's sensor daemon evaluates sensors every 5 s at the most.
PROBE_INTERVAL = timedelta(seconds=5)
# The jobs the lane announced again are left out of the claim-latency sample this long (their
# claim was the re-announcement's doing), and at most this many of them are remembered.
REMEMBER_REANNOUNCED = timedelta(minutes=15)
MAX_REMEMBERED = 5_000


@dataclass(frozen=True)
class LaneSettings:
    """What the lane does (the defaults are the constants beside each rule)."""

    reannounce: bool = True
    floor: timedelta = REANNOUNCE_FLOOR
    stale_pending_after: timedelta = STALE_PENDING_AFTER
    max_announcements: int = MAX_ANNOUNCEMENTS_PER_TICK
    retry_after: timedelta = RETRY_AFTER
    grace: timedelta = ORPHAN_MIN_AGE
    max_attempts: int = MAX_ATTEMPTS
    max_enqueue: int = MAX_ENQUEUE_PER_TICK


def _instant(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


@dataclass(frozen=True)
class LaneState:
    """The sensor's cursor: where the windows are, the threshold in use, what it knows of the
    workers and the AI service, and the jobs it announced again lately."""

    until: datetime | None = None  # the end of the last window fully announced
    resume: LaneWindow | None = None  # a window the cap stopped in, and where
    round: int = 0  # announcement rounds so far (a round: a tick that announced something)
    threshold: timedelta = REANNOUNCE_FLOOR
    claim_p99: timedelta | None = None
    claims: int = 0
    estimated_at: datetime | None = None
    last_success: dict[str, datetime] = field(default_factory=dict)
    reannounced: dict[int, float] = field(default_factory=dict)  # job id -> when (epoch s)
    # False when the lane does not re-announce (SAN_REANNOUNCE=off, or no dispatcher to
    # announce with): the threshold above is then not in use
    reannouncing: bool = True

    def to_json(self) -> str:
        return json.dumps(
            {
                "until": self.until.isoformat() if self.until else None,
                "resume": None
                if self.resume is None
                else {
                    "since": self.resume.since.isoformat(),
                    "until": self.resume.until.isoformat(),
                    "after": [self.resume.after[0].isoformat(), self.resume.after[1]],
                },
                "round": self.round,
                "threshold_s": self.threshold.total_seconds(),
                "claim_p99_s": self.claim_p99.total_seconds() if self.claim_p99 else None,
                "claims": self.claims,
                "estimated_at": self.estimated_at.isoformat() if self.estimated_at else None,
                "last_success": {kind: at.isoformat() for kind, at in self.last_success.items()},
                "reannounced": {str(job): at for job, at in self.reannounced.items()},
                "reannouncing": self.reannouncing,
            }
        )

    @classmethod
    def from_json(cls, text: str | None) -> "LaneState":
        if not text:
            return cls()
        data = json.loads(text)
        if "round" not in data:  # a cursor from before: only the window's end
            return cls(until=_instant(data.get("until")) if isinstance(data, dict) else None)
        resume = data.get("resume")
        return cls(
            until=_instant(data["until"]),
            resume=None
            if resume is None
            else LaneWindow(
                since=_instant(resume["since"]),
                until=_instant(resume["until"]),
                after=(_instant(resume["after"][0]), int(resume["after"][1])),
            ),
            round=data["round"],
            threshold=timedelta(seconds=data["threshold_s"]),
            claim_p99=timedelta(seconds=data["claim_p99_s"]) if data.get("claim_p99_s") else None,
            claims=data.get("claims", 0),
            estimated_at=_instant(data.get("estimated_at")),
            last_success={kind: _instant(at) for kind, at in data.get("last_success", {}).items()},
            reannounced={int(job): at for job, at in data.get("reannounced", {}).items()},
            reannouncing=data.get("reannouncing", True),
        )


@dataclass
class Tick:
    now: datetime
    window: LaneWindow
    ages: list[timedelta]
    announcements: AnnounceReport
    retries: dict[str, int]  # area -> targets a run would retry or enqueue now
    state: LaneState  # the cursor after this tick

    @property
    def retries_due(self) -> int:
        return sum(self.retries.values())

    def summary(self) -> str:
        retries = ", ".join(f"{area} {count}" for area, count in self.retries.items())
        announcing = (
            f"re-announcing after {self.state.threshold.total_seconds():g} s: "
            f"{self.announcements.announced} jobs announced again"
            + (
                f" ({self.announcements.left_for_next_tick} left for the next tick)"
                if self.announcements.left_for_next_tick
                else ""
            )
            if self.state.reannouncing
            else "re-announcing off (SAN_REANNOUNCE=off, or no job dispatcher)"
        )
        return (
            f"window {self.window.since.isoformat()} .. {self.window.until.isoformat()}, "
            f"{announcing}; targets to retry or enqueue: {retries}"
        )


def estimate(state: LaneState, stats: ClaimStats, now: datetime, floor: timedelta) -> LaneState:
    """The state with a new threshold from `stats` (kept when there were too few claims), and
    the latest success of each job type (kept where the sample had none)."""
    return replace(
        state,
        threshold=threshold_for(stats.p99, floor) if stats.p99 is not None else state.threshold,
        claim_p99=stats.p99 if stats.p99 is not None else state.claim_p99,
        claims=stats.claims,
        estimated_at=now,
        last_success={**state.last_success, **stats.last_success},
    )


def lane_tick(
    engine: Engine,
    dispatcher: Dispatcher,
    state: LaneState,
    settings: LaneSettings,
    recoveries,
    limits: WriteLimits = WriteLimits(),
) -> Tick:
    """One tick: probe in one transaction, then announce what is due (its own transaction)."""
    announcing = settings.reannounce and dispatcher.kind != "none"
    with read_transaction(engine, limits) as conn:
        now = database_now(conn)
        if state.estimated_at is None or now - state.estimated_at >= ESTIMATE_EVERY:
            state = estimate(
                state, claim_stats(conn, now, set(state.reannounced)), now, settings.floor
            )
        window = state.resume or LaneWindow.after_window(state.until, now, first=PROBE_INTERVAL)
        ages = (
            announcement_ages(state.threshold, settings.stale_pending_after, settings.floor)
            if announcing
            else []
        )
        due = due_announcements(conn, window, ages, settings.max_announcements)
        full = bool(ages) and len(due) >= settings.max_announcements
        last = (
            (due["created_at"].iloc[-1].to_pydatetime(), int(due["job_id"].iloc[-1]))
            if full
            else None
        )
        left = due_after(conn, replace(window, after=last), ages) if full else 0
        retries = {
            recovery.area: len(
                due_retries(
                    conn,
                    recovery,
                    now,
                    grace=settings.grace,
                    max_attempts=settings.max_attempts,
                    last_success=state.last_success,
                    retry_after=settings.retry_after,
                )
            )
            for recovery in recoveries
        }
    report = reannounce(engine, dispatcher, due, now, limits)
    report.left_for_next_tick = left
    cutoff = now.timestamp() - REMEMBER_REANNOUNCED.total_seconds()
    remembered = {job: at for job, at in state.reannounced.items() if at >= cutoff}
    remembered.update({job: now.timestamp() for job in report.announced_ids})
    if len(remembered) > MAX_REMEMBERED:
        remembered = dict(sorted(remembered.items(), key=lambda item: item[1])[-MAX_REMEMBERED:])
    state = replace(
        state,
        until=state.until if full else window.until,
        resume=replace(window, after=last) if full else None,
        round=state.round + (1 if report.detected else 0),
        reannounced=remembered,
        reannouncing=announcing,
    )
    return Tick(now, window, ages, report, retries, state)
