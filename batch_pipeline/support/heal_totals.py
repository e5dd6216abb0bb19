"""What batch_pipeline healed since it was installed, by area, and how long the healed fragments
had waited: running totals folded from the audit (the recoveries' and the fast lane's
materializations) into one key of Dagster's own key-value storage. The metrics endpoint
exports them (`batch_pipeline_healed_total`, `batch_pipeline_time_to_heal_seconds`).

Monotonic across restarts and run retention: the totals are stored, not recounted from the
events, so a deleted 90-day-old run takes nothing away. Exactly once: the totals and the
watermark they were folded up to are one JSON value written in one statement, so a tick that
dies before writing it is redone whole by the next, and one that dies after has nothing to
redo. One writer: audit_index_sensor's tick (the daemon runs one at a time).
"""

import json
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta

from dagster import DagsterInstance

from batch_pipeline.fast_lane.assets import RETRIES_ASSET
from batch_pipeline.recovery.plan import (
    HEAL_AGE_HISTOGRAM,
    OVER_THE_LAST_BUCKET,
    TIME_TO_HEAL_BUCKETS,
)
from batch_pipeline.recovery.registry import AREAS
from batch_pipeline.support.audit_index import Event, events_after

TOTALS_KEY = "batch_pipeline/heal_totals/v1"
# The lane of each healing asset: recovery_job's areas, and the fast lane's retries.
RECOVERY_LANE = "recovery_job"
FAST_LANE = "fast_lane"
LANE_OF_ASSET = {**dict.fromkeys(AREAS, RECOVERY_LANE), RETRIES_ASSET: FAST_LANE}
BUCKET_BOUNDS = (*map(str, TIME_TO_HEAL_BUCKETS), OVER_THE_LAST_BUCKET)
FOLD_BATCH = 2_000


@dataclass
class HealTotals:
    healed: dict[str, int] = field(default_factory=dict)  # area -> targets given a new job
    # lane -> heal-age bucket (upper bound) -> fragments healed, not cumulative
    buckets: dict[str, dict[str, int]] = field(default_factory=dict)
    age_sum_seconds: dict[str, float] = field(default_factory=dict)  # lane -> seconds waited
    after: dict[str, int] = field(default_factory=dict)  # asset -> last storage id folded

    def to_json(self) -> str:
        return json.dumps(self.__dict__)

    @classmethod
    def from_json(cls, value: str | None) -> "HealTotals":
        return cls(**json.loads(value)) if value else cls()

    def fold(self, event: Event) -> None:
        """Add what one materialization healed (a dry run healed nothing)."""
        self.after[event.asset] = event.storage_id
        metadata = event.metadata
        if metadata.get("dry_run"):
            return
        if event.asset == RETRIES_ASSET:
            by_area = {area: counts["enqueued"] for area, counts in metadata["by_area"].items()}
        else:
            by_area = {event.asset: metadata.get("enqueued", 0)}
        for area, enqueued in by_area.items():
            self.healed[area] = self.healed.get(area, 0) + int(enqueued)
        lane = LANE_OF_ASSET[event.asset]
        lane_buckets = defaultdict(int, self.buckets.get(lane, {}))
        histogram = metadata.get(HEAL_AGE_HISTOGRAM) or {"buckets": {}, "sum_seconds": 0.0}
        for bound, count in histogram["buckets"].items():
            lane_buckets[bound] += int(count)
        self.buckets[lane] = dict(lane_buckets)
        self.age_sum_seconds[lane] = self.age_sum_seconds.get(lane, 0.0) + float(
            histogram["sum_seconds"]
        )


def read_heal_totals(instance: DagsterInstance) -> HealTotals:
    stored = instance.daemon_cursor_storage.get_cursor_values({TOTALS_KEY})
    return HealTotals.from_json(stored.get(TOTALS_KEY))


def update_heal_totals(
    instance: DagsterInstance, budget: timedelta = timedelta(seconds=10), batch: int = FOLD_BATCH
) -> int:
    """Fold the healing assets' materializations after the stored watermarks, `batch` per asset
    and write, until none are left or `budget` is spent; returns how many were folded."""
    deadline = time.monotonic() + budget.total_seconds()
    folded = 0
    while True:
        totals = read_heal_totals(instance)
        read = 0
        for asset in LANE_OF_ASSET:
            for event in events_after(
                instance, asset, "materialization", totals.after.get(asset), batch
            ):
                totals.fold(event)
                read += 1
        if not read:
            return folded
        instance.daemon_cursor_storage.set_cursor_values({TOTALS_KEY: totals.to_json()})
        folded += read
        if time.monotonic() > deadline:
            return folded
