"""An index of the audit trail by target, kept in Dagster's own key-value storage (never in SAN's
tables), so `explain` finds the runs that touched a scrap without reading 90 days of events.

It is derived from the audit: audit_index_sensor reads the audited assets' events after its
watermarks (one per asset and event type), turns them into touches (touches.py) and folds them
into buckets of BUCKET_SIZE targets, one key each: `batch_pipeline/audit_index/v1/scrap/1234`
holds the touches of scraps 123400-123499. Reading a story costs one key-value lookup, plus the
events after the watermarks (the tail the sensor has not indexed yet, at most TAIL_LIMIT each).

Crash-safe by being idempotent: the buckets are written before the watermarks, and folding a
touch a second time changes nothing (a touch is known by its event's storage id), so a tick
that dies half-way is redone by the next one. Bounded: a target keeps its newest
MAX_TOUCHES_PER_TARGET touches, and touches older than the run retention's horizon are dropped
(their runs, and events, are deleted by run_retention_job).
"""

import json
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from dagster import AssetKey, AssetRecordsFilter, DagsterInstance

from batch_pipeline.support.touches import AUDITED_ASSETS, REPEATED, Event, Touch, touches_of

PREFIX = "batch_pipeline/audit_index/v1"
WATERMARKS_KEY = f"{PREFIX}/watermarks"
BUCKET_SIZE = 100
# Events read per asset and event type in one pass (the sensor makes passes until its budget).
INDEX_BATCH = 2_000
# The events after the watermarks a story reads itself, per asset and event type.
TAIL_LIMIT = 2_000
MAX_TOUCHES_PER_TARGET = 200
EVENT_TYPES = ("materialization", "observation")


def bucket_key(kind: str, target_id: int) -> str:
    return f"{PREFIX}/{kind}/{target_id // BUCKET_SIZE}"


def watermark_name(asset: str, event_type: str) -> str:
    return f"{asset}/{event_type}"


def events_after(
    instance: DagsterInstance, asset: str, event_type: str, after: int | None, limit: int
) -> list[Event]:
    """The asset's events of `event_type` after storage id `after`, oldest first."""
    records_filter = AssetRecordsFilter(asset_key=AssetKey(asset), after_storage_id=after)
    observation = event_type == "observation"
    fetch = instance.fetch_observations if observation else instance.fetch_materializations
    events = []
    for record in fetch(records_filter, limit=limit, ascending=True).records:
        entry = record.event_log_entry
        audited = entry.asset_observation if observation else entry.asset_materialization
        events.append(
            Event(
                asset=asset,
                storage_id=record.storage_id,
                at=entry.timestamp,
                run_id=entry.run_id or "",
                metadata={name: value.value for name, value in audited.metadata.items()},
                observation=observation,
            )
        )
    return events


def read_watermarks(instance: DagsterInstance) -> dict[str, int]:
    stored = instance.daemon_cursor_storage.get_cursor_values({WATERMARKS_KEY})
    return json.loads(stored[WATERMARKS_KEY]) if stored.get(WATERMARKS_KEY) else {}


def fold(touches: list[Touch], touch: Touch) -> list[Touch]:
    """`touches` (one target's, oldest first) with `touch` added: nothing changes if it is there
    already; a REPEATED action extends the latest streak of the same asset and action."""
    for known in touches:
        first = known.first_storage_id or known.storage_id
        if known.action == touch.action and known.asset == touch.asset:
            if known.storage_id == touch.storage_id and known.job_id == touch.job_id:
                return touches
            if touch.action in REPEATED and first <= touch.storage_id <= known.storage_id:
                return touches  # folded into this streak already
    if touch.action in REPEATED and not touch.committed_by_failed_attempt:
        for index in range(len(touches) - 1, -1, -1):
            known = touches[index]
            if (known.action, known.asset) == (touch.action, touch.asset):
                if touch.storage_id > known.storage_id:
                    return [*touches[:index], *touches[index + 1 :], touch.folded_into(known)]
                break
    return [*touches, touch]


def _ordered(touches: Iterable[Touch], horizon: float) -> list[Touch]:
    kept = [t for t in touches if t.at >= horizon]
    kept.sort(key=lambda t: (t.first_storage_id or t.storage_id, t.storage_id))
    return kept[-MAX_TOUCHES_PER_TARGET:]


@dataclass
class IndexProgress:
    events: int = 0
    touches: int = 0
    buckets_written: int = 0
    behind: bool = False  # a pass stopped at INDEX_BATCH: more events are waiting


def index_pass(
    instance: DagsterInstance, horizon: datetime, batch: int = INDEX_BATCH
) -> IndexProgress:
    """Index the events after the watermarks, at most `batch` per asset and event type."""
    storage = instance.daemon_cursor_storage
    watermarks = read_watermarks(instance)
    progress = IndexProgress()
    events: list[Event] = []
    for asset in AUDITED_ASSETS:
        for event_type in EVENT_TYPES:
            name = watermark_name(asset, event_type)
            found = events_after(instance, asset, event_type, watermarks.get(name), batch)
            if found:
                watermarks[name] = found[-1].storage_id
                events += found
            progress.behind = progress.behind or len(found) == batch
    progress.events = len(events)
    if not events:
        return progress
    by_key: dict[str, list[Touch]] = defaultdict(list)
    for event in events:
        for touch in touches_of(event):
            by_key[bucket_key(*touch.key)].append(touch)
            progress.touches += 1
    stored = storage.get_cursor_values(set(by_key)) if by_key else {}
    oldest = horizon.timestamp()
    written: dict[str, str] = {}
    for key, touches in by_key.items():
        bucket = {
            target: [Touch.from_json(value) for value in values]
            for target, values in json.loads(stored.get(key) or "{}").items()
        }
        for touch in sorted(touches, key=lambda t: t.storage_id):
            target = str(touch.target_id)
            bucket[target] = fold(bucket.get(target, []), touch)
        written[key] = json.dumps(
            {
                target: [touch.to_json() for touch in _ordered(values, oldest)]
                for target, values in bucket.items()
            },
            separators=(",", ":"),
        )
    # New keys and existing ones in separate calls (SQLite's upsert of a mix updates only the
    # existing ones), the watermarks last: a pass that dies before them is redone, harmlessly.
    new = {key: value for key, value in written.items() if key not in stored}
    existing = {key: value for key, value in written.items() if key in stored}
    for pairs in (new, existing):
        if pairs:
            storage.set_cursor_values(pairs)
    storage.set_cursor_values({WATERMARKS_KEY: json.dumps(watermarks)})
    progress.buckets_written = len(written)
    return progress


def update_index(
    instance: DagsterInstance,
    horizon: datetime,
    budget: timedelta = timedelta(seconds=20),
    batch: int = INDEX_BATCH,
) -> IndexProgress:
    """Passes of index_pass until the index is up to date or `budget` is spent."""
    total = IndexProgress()
    deadline = time.monotonic() + budget.total_seconds()
    while True:
        step = index_pass(instance, horizon, batch)
        total.events += step.events
        total.touches += step.touches
        total.buckets_written += step.buckets_written
        total.behind = step.behind
        if not step.behind or time.monotonic() > deadline:
            return total


@dataclass
class AuditRead:
    touches: list[Touch] = field(default_factory=list)
    tail_events: int = 0  # read past the index (not indexed yet)
    behind: bool = False  # the tail was longer than TAIL_LIMIT: newer touches may be missing
    indexed: bool = True  # the index exists (audit_index_sensor has run)


def touches_for(
    instance: DagsterInstance,
    keys: Sequence[tuple[str, int]],
    horizon: datetime,
    tail_limit: int = TAIL_LIMIT,
) -> AuditRead:
    """Every touch of the targets `keys` ((kind, id) pairs) since `horizon`, oldest first: the
    index's, then the events it has not reached yet."""
    wanted = set(keys)
    stored = instance.daemon_cursor_storage.get_cursor_values(
        {bucket_key(*key) for key in wanted} | {WATERMARKS_KEY}
    )
    watermarks = json.loads(stored.get(WATERMARKS_KEY) or "{}")
    found: dict[tuple[str, int], list[Touch]] = defaultdict(list)
    for kind, target in wanted:
        bucket = json.loads(stored.get(bucket_key(kind, target)) or "{}")
        found[(kind, target)] = [Touch.from_json(value) for value in bucket.get(str(target), [])]
    read = AuditRead(indexed=bool(watermarks))
    for asset in AUDITED_ASSETS:
        for event_type in EVENT_TYPES:
            name = watermark_name(asset, event_type)
            tail = events_after(instance, asset, event_type, watermarks.get(name), tail_limit)
            read.tail_events += len(tail)
            read.behind = read.behind or len(tail) == tail_limit
            for event in tail:
                for touch in touches_of(event):
                    if touch.key in wanted:
                        found[touch.key] = fold(found[touch.key], touch)
    oldest = horizon.timestamp()
    kept = [t for touches in found.values() for t in _ordered(touches, oldest)]
    read.touches = sorted(kept, key=lambda t: (t.first_storage_id or t.storage_id, t.storage_id))
    return read


def retention_horizon(now: datetime | None, days: int) -> datetime:
    return (now or datetime.now(UTC)) - timedelta(days=days)
