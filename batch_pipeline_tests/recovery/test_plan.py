"""What every recovery shares after detection: the caps, the report, and the skeleton that
writes and audits."""

from datetime import UTC, datetime

import pandas as pd
import pytest

from batch_pipeline.recovery.plan import (
    COMMITTED_BY_FAILED_ATTEMPT,
    TIME_TO_HEAL_BUCKETS,
    RecoveryPolicy,
    RecoveryReport,
    Writes,
    heal_age_metadata,
    heal_ages,
    partial_report,
    plan_recovery,
    planned_report,
    write_recovery,
)
from batch_pipeline.san.dispatch import Dispatcher
from batch_pipeline.san.enqueue import BatchWritten

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def candidates(*rows):
    """(id, saved minutes ago, attempts) rows as a detection frame."""
    return pd.DataFrame(
        {
            "scrap_id": [r[0] for r in rows],
            "created_at": pd.to_datetime(
                [NOW - pd.Timedelta(minutes=r[1]) for r in rows], utc=True
            ),
            "attempts": [r[2] for r in rows],
        }
    )


def test_the_plan_takes_the_oldest_under_the_cap_and_defers_the_rest():
    frame = candidates((1, 10, 0), (2, 50, 3), (3, 30, 10), (4, 40, 0), (5, 20, 9))
    plan = plan_recovery(
        frame,
        oldest_first_by=["created_at", "scrap_id"],
        policy=RecoveryPolicy(max_attempts=10, max_enqueue_per_run=2),
    )
    assert plan.to_enqueue["scrap_id"].tolist() == [2, 4]  # oldest first
    assert plan.exhausted["scrap_id"].tolist() == [3]  # at the cap: never enqueued
    assert plan.deferred["scrap_id"].tolist() == [5, 1]  # the next run's, oldest first


def test_max_attempts_zero_is_unlimited():
    plan = plan_recovery(
        candidates((1, 10, 500)),
        oldest_first_by=["created_at", "scrap_id"],
        policy=RecoveryPolicy(max_attempts=0),
    )
    assert plan.to_enqueue["scrap_id"].tolist() == [1] and plan.exhausted.empty


def test_the_planned_report_is_what_a_dry_run_says():
    frame = candidates((1, 10, 0), (2, 20, 10), (3, 30, 0))
    policy = RecoveryPolicy(max_enqueue_per_run=1, dry_run=True)
    plan = plan_recovery(frame, oldest_first_by=["created_at", "scrap_id"], policy=policy)
    report = planned_report("area", frame, plan, "scrap_id", {"grace": 10}, policy)
    assert (report.detected, report.exhausted, report.deferred) == (3, 1, 1)
    assert report.exhausted_ids == [2] and report.deferred_ids == [1]
    assert report.thresholds == {"grace": 10, **policy.caps()} and report.dry_run


def test_heal_ages_are_seconds_to_now_even_from_the_oldest_instant_a_frame_holds():
    since = pd.Series(pd.to_datetime([NOW - pd.Timedelta(seconds=90), "1678-01-01"], utc=True))
    ages = heal_ages(since, NOW)
    assert ages[0] == 90.0 and ages[1] > 1e10
    assert heal_age_metadata([]) == {}  # a run that healed nothing plots no false zero
    metadata = heal_age_metadata([1.0, 3.0, 8.0, 15.0, 16.0, 90_000.0])
    assert metadata["heal_age_median_seconds"] == 11.5
    assert metadata["heal_age_max_seconds"] == 90_000.0
    histogram = metadata["heal_age_histogram"]  # JSON: the UI plots only the two above
    assert histogram["sum_seconds"] == 90_043.0
    # per bucket, not cumulative; a bound is inclusive (Prometheus' `le`)
    buckets = histogram["buckets"]
    assert (buckets["15"], buckets["30"], buckets["+Inf"]) == (4, 1, 1)
    assert sum(buckets.values()) == 6
    assert list(buckets) == [*map(str, TIME_TO_HEAL_BUCKETS), "+Inf"]


def test_merging_a_failed_attempts_commits_counts_its_work_once():
    earlier = RecoveryReport("area", False, {}, detected=4, enqueued=2, changed=2, batches=1)
    earlier.recovered = [{"scrap_id": 1, "new_job_id": 11}, {"scrap_id": 2, "new_job_id": 12}]
    earlier.exhausted, earlier.exhausted_ids = 1, [9]
    earlier.heal_ages_seconds = [5.0, 6.0]
    committed = earlier.committed_metadata(failed_attempt=0)
    assert committed[COMMITTED_BY_FAILED_ATTEMPT] == 0
    # the retry detected anew: the 2 the first attempt healed are no candidates of its own
    retry = RecoveryReport("area", False, {}, detected=2, enqueued=1, skipped_by_race=1, batches=1)
    retry.recovered = [{"scrap_id": 3, "new_job_id": 13}]
    retry.exhausted, retry.exhausted_ids = 1, [9]
    retry.merge_committed([committed])
    assert (retry.enqueued, retry.skipped_by_race, retry.exhausted) == (3, 1, 1)
    assert [pair["scrap_id"] for pair in retry.recovered] == [1, 2, 3]
    assert retry.exhausted_ids == [9] and retry.earlier_attempts == 1 and retry.batches == 2
    assert retry.heal_ages_seconds == [5.0, 6.0]


class FailsOnBatch(Dispatcher):
    def __init__(self, n):
        self.n, self.calls = n, 0

    def announce_in_transaction(self, conn, new_jobs):
        self.calls += 1
        if self.calls == self.n:
            raise RuntimeError("connection lost")


def test_the_skeleton_writes_in_batches_and_attaches_what_committed_to_a_later_failure(san_db):
    written = []

    def write_batch(conn, batch):
        written.append(list(batch))
        return BatchWritten(list(batch), [])

    def complete(results, batches):
        return RecoveryReport(
            "area", False, {}, changed=sum(map(len, results)), batches=batches.batches
        )

    policy = RecoveryPolicy(batch_size=2)
    report = write_recovery(
        san_db.engine, Dispatcher(), Writes([1, 2, 3, 4, 5], write_batch, complete), policy
    )
    assert written == [[1, 2], [3, 4], [5]] and (report.changed, report.batches) == (5, 3)

    with pytest.raises(RuntimeError, match="connection lost") as failure:
        write_recovery(
            san_db.engine, FailsOnBatch(2), Writes([1, 2, 3, 4, 5], write_batch, complete), policy
        )
    committed = partial_report(failure.value)
    assert (committed.changed, committed.batches) == (2, 1)  # batch 1 only: batch 2 rolled back
