"""The audit trail read back per target: what each materialization of the recoveries, the fast
lane and redrive says it did to which scrap, summary or job, as `Touch`es.

One reader per audit asset, each over the metadata its writer records (recovery/plan.py's
RecoveryReport, fast_lane's retries and re-announcements, support/redrive.py): the index
(audit_index.py) and the story's tail read events only through `touches_of`.
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, asdict, dataclass, fields, replace

from batch_pipeline.fast_lane.assets import REANNOUNCEMENTS_ASSET, RETRIES_ASSET
from batch_pipeline.recovery.ghost_jobs import AREA as GHOST_AREA
from batch_pipeline.recovery.plan import COMMITTED_BY_FAILED_ATTEMPT
from batch_pipeline.recovery.registry import TARGET_RECOVERIES
from batch_pipeline.san.tables import daily_summaries, scraps

REDRIVE_ASSET = "redrive"

# What the explain command calls each target table.
KIND_OF_TABLE = {scraps.name: "scrap", daily_summaries.name: "summary"}
JOB = "job"
KINDS = (*KIND_OF_TABLE.values(), JOB)
# The kind of target of each job type (the recovery that heals it says which table it is).
KIND_OF_JOB_TYPE = {r.job_type: KIND_OF_TABLE[r.table.name] for r in TARGET_RECOVERIES}
BY_AREA = {r.area: r for r in TARGET_RECOVERIES}

# What a run did to a target, as the story says it.
RE_ENQUEUED = "re-enqueued"
RETRIED = "retried by the fast lane"
CLOSED_AS_GHOST = "closed as a ghost"
REANNOUNCED = "announced again"
DEFERRED = "deferred (per-run cap)"
EXHAUSTED = "listed as exhausted"
SKIPPED_BY_RACE = "skipped by race"
REDRIVEN = "redriven"
# Listed run after run while the target stays so: one entry per streak, with its count.
REPEATED = (DEFERRED, EXHAUSTED)


@dataclass(frozen=True)
class Touch:
    """One thing one audited event did to one target (`kind`, `target_id`)."""

    kind: str  # "scrap", "summary", or "job" when the event names only a job
    target_id: int
    action: str
    asset: str
    storage_id: int  # the event's id in Dagster's event log
    at: float  # its timestamp (seconds since the epoch)
    run_id: str  # "" for a sensor's own event (the fast lane's re-announcements)
    job_id: int | None = None  # the job concerned (the ghost closed, the job announced)
    new_job_id: int | None = None  # the job the action created
    note: str = ""  # what else the audit says (stale status, who asked for a redrive)
    times: int = 1  # a REPEATED action: how many events in a row listed it
    first_at: float | None = None  # a REPEATED action: the first of them
    first_storage_id: int | None = None
    committed_by_failed_attempt: bool = False

    @property
    def key(self) -> tuple[str, int]:
        return (self.kind, self.target_id)

    def to_json(self) -> dict:
        """Its fields, those at their default left out (the index holds many)."""
        return {
            name: value
            for name, value in asdict(self).items()
            if name not in OPTIONAL or value != OPTIONAL[name]
        }

    @classmethod
    def from_json(cls, value: Mapping) -> "Touch":
        return cls(**value)

    def folded_into(self, earlier: "Touch") -> "Touch":
        """`earlier` (the same REPEATED action) extended by this one."""
        return replace(
            self,
            times=earlier.times + self.times,
            first_at=earlier.first_at or earlier.at,
            first_storage_id=earlier.first_storage_id or earlier.storage_id,
        )


OPTIONAL = {f.name: f.default for f in fields(Touch) if f.default is not MISSING}


@dataclass(frozen=True)
class Event:
    """An audited event as the readers need it."""

    asset: str
    storage_id: int
    at: float
    run_id: str
    metadata: Mapping  # values already plain (MetadataValue.value)
    observation: bool = False


def _touch(event: Event, kind: str, target_id, action: str, **details) -> Touch:
    return Touch(
        kind=kind,
        target_id=int(target_id),
        action=action,
        asset=event.asset,
        storage_id=event.storage_id,
        at=event.at,
        run_id=event.run_id,
        **details,
    )


def _listed(event: Event, metadata: Mapping, kind: str, lists: Iterable[tuple[str, str]]):
    for name, action in lists:
        for target in metadata.get(name) or []:
            yield _touch(event, kind, target, action)


def _target_area(event: Event, metadata: Mapping) -> Iterable[Touch]:
    recovery = BY_AREA[metadata.get("area", event.asset)]
    kind = KIND_OF_TABLE[recovery.table.name]
    for pair in metadata.get("recovered") or []:
        yield _touch(event, kind, pair[recovery.id_key], RE_ENQUEUED, new_job_id=pair["new_job_id"])
    yield from _listed(
        event,
        metadata,
        kind,
        (
            ("exhausted_ids", EXHAUSTED),
            ("deferred_ids", DEFERRED),
            ("skipped_by_race_ids", SKIPPED_BY_RACE),
        ),
    )


def _ghost_area(event: Event, metadata: Mapping) -> Iterable[Touch]:
    for closed in metadata.get("recovered") or []:
        kind, target = KIND_OF_JOB_TYPE.get(closed["job_type"]), closed["target_id"]
        if kind is None:  # a job type no recovery knows: the story of the job itself
            kind, target = JOB, closed["failed_job_id"]
        yield _touch(
            event,
            kind,
            target,
            CLOSED_AS_GHOST,
            job_id=closed["failed_job_id"],
            new_job_id=closed.get("new_job_id"),
            note=f"stale in {closed.get('stale_status', '?')}"
            + ("" if closed.get("new_job_id") else "; no replacement: at max_attempts"),
        )
    # the ghosts left for the next run, or changed under the run: only their job ids are known
    yield from _listed(
        event, metadata, JOB, (("deferred_ids", DEFERRED), ("skipped_by_race_ids", SKIPPED_BY_RACE))
    )


def _retries(event: Event, metadata: Mapping) -> Iterable[Touch]:
    for pair in metadata.get("recovered") or []:
        recovery = BY_AREA[pair["area"]]
        yield _touch(
            event,
            KIND_OF_TABLE[recovery.table.name],
            pair[recovery.id_key],
            RETRIED,
            new_job_id=pair["new_job_id"],
        )
    for area, targets in (metadata.get("skipped_by_race_ids") or {}).items():
        for target in targets:
            kind = KIND_OF_TABLE[BY_AREA[area].table.name]
            yield _touch(event, kind, target, SKIPPED_BY_RACE)


def _reannouncements(event: Event, metadata: Mapping) -> Iterable[Touch]:
    for job_id in metadata.get("announced_job_ids") or []:
        yield _touch(event, JOB, job_id, REANNOUNCED, job_id=int(job_id))


def _redrives(event: Event, metadata: Mapping) -> Iterable[Touch]:
    asked = f"asked by {metadata.get('asked_by') or '?'}"
    if metadata.get("reason"):
        asked += f": {metadata['reason']}"
    for pair in metadata.get("redriven") or []:
        recovery = BY_AREA[pair["area"]]
        yield _touch(
            event,
            KIND_OF_TABLE[recovery.table.name],
            pair["target_id"],
            REDRIVEN,
            new_job_id=pair["new_job_id"],
            note=f"its job {pair['attempts_before'] + 1}, beyond max_attempts "
            f"{metadata.get('max_attempts', '?')}; {asked}",
        )


READERS: dict[str, Callable[[Event, Mapping], Iterable[Touch]]] = {
    **{recovery.area: _target_area for recovery in TARGET_RECOVERIES},
    GHOST_AREA: _ghost_area,
    RETRIES_ASSET: _retries,
    REANNOUNCEMENTS_ASSET: _reannouncements,
    REDRIVE_ASSET: _redrives,
}
AUDITED_ASSETS = tuple(READERS)


def touches_of(event: Event) -> list[Touch]:
    """What `event` did, target by target. A dry run wrote nothing: no touches. An observation
    of work committed by an attempt that failed afterwards counts, marked so (its run's retry
    may list the same work again)."""
    read = READERS[event.asset]
    metadata = event.metadata
    if event.observation:
        if COMMITTED_BY_FAILED_ATTEMPT not in metadata:
            return []  # a dry run
        # a step of several areas records each area's part (recovery/ops.py)
        parts = (
            [(READERS[part["area"]], part) for part in metadata["areas"]]
            if "areas" in metadata
            else [(read, metadata)]
        )
        touches = [
            replace(touch, committed_by_failed_attempt=True)
            for reader, part in parts
            for touch in reader(event, part)
        ]
        if event.asset == RETRIES_ASSET:  # the lane's parts are its areas' reports
            touches = [
                replace(t, action=RETRIED) if t.action == RE_ENQUEUED else t for t in touches
            ]
        return touches
    return list(read(event, metadata))
