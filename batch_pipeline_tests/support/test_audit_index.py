"""The audit index in Dagster's key-value storage, on SQLite and PostgreSQL storage: derived from
the events, idempotent (a pass redone after a crash changes nothing), bounded, and read together
with the events it has not reached yet."""

from datetime import UTC, datetime, timedelta

import pytest
from dagster import AssetMaterialization

from batch_pipeline.recovery.orphan_scraps import ORPHAN_SCRAPS
from batch_pipeline.recovery.plan import RecoveryReport
from batch_pipeline.san.ops import as_metadata
from batch_pipeline.support import audit_index
from batch_pipeline.support.audit_index import (
    BUCKET_SIZE,
    PREFIX,
    WATERMARKS_KEY,
    index_pass,
    touches_for,
    update_index,
)
from batch_pipeline.support.touches import EXHAUSTED, RE_ENQUEUED

LONG_AGO = datetime(2000, 1, 1, tzinfo=UTC)


def audit(instance, recovered=(), exhausted=()):
    """One materialization of orphan_scrap_recovery, as a run records it."""
    report = RecoveryReport(
        area=ORPHAN_SCRAPS.area,
        dry_run=False,
        thresholds={},
        recovered=[{"scrap_id": s, "new_job_id": j} for s, j in recovered],
        exhausted_ids=list(exhausted),
    )
    instance.report_runless_asset_event(
        AssetMaterialization(asset_key=ORPHAN_SCRAPS.area, metadata=as_metadata(report.metadata()))
    )


def story(instance, *scraps, tail_limit=audit_index.TAIL_LIMIT, horizon=LONG_AGO):
    return touches_for(instance, [("scrap", s) for s in scraps], horizon, tail_limit)


def buckets(instance):
    storage = instance.daemon_cursor_storage
    keys = {f"{PREFIX}/scrap/{n}" for n in range(0, 50)}
    return dict(storage.get_cursor_values(keys))


def test_the_index_finds_each_targets_touches(dagster_instance):
    audit(dagster_instance, recovered=[(1, 100), (250, 101)])
    audit(dagster_instance, recovered=[(1, 102)])
    progress = update_index(dagster_instance, LONG_AGO)
    assert (progress.events, progress.touches, progress.behind) == (2, 3, False)
    read = story(dagster_instance, 1)
    assert [(t.action, t.new_job_id) for t in read.touches] == [
        (RE_ENQUEUED, 100),
        (RE_ENQUEUED, 102),
    ]
    assert read.tail_events == 0 and read.indexed
    assert [t.new_job_id for t in story(dagster_instance, 250).touches] == [101]
    assert story(dagster_instance, 2).touches == []


def test_a_pass_redone_changes_nothing(dagster_instance):
    audit(dagster_instance, recovered=[(1, 100)], exhausted=[2])
    audit(dagster_instance, exhausted=[2])
    update_index(dagster_instance, LONG_AGO)
    before = buckets(dagster_instance)
    dagster_instance.daemon_cursor_storage.set_cursor_values({WATERMARKS_KEY: "{}"})
    update_index(dagster_instance, LONG_AGO)  # every event again
    assert buckets(dagster_instance) == before


def test_a_pass_that_dies_before_its_watermarks_is_redone_without_duplicates(
    dagster_instance, monkeypatch
):
    audit(dagster_instance, recovered=[(1, 100)])
    update_index(dagster_instance, LONG_AGO)
    # one event for the existing bucket, one for a new bucket: a mixed write
    audit(dagster_instance, recovered=[(1, 103), (BUCKET_SIZE * 7, 104)])
    storage = dagster_instance.daemon_cursor_storage
    write = storage.set_cursor_values

    def dies_at_the_watermarks(pairs):
        if WATERMARKS_KEY in pairs:
            raise ConnectionError("the daemon died")
        write(pairs)

    monkeypatch.setattr(storage, "set_cursor_values", dies_at_the_watermarks)
    with pytest.raises(ConnectionError):
        index_pass(dagster_instance, LONG_AGO)
    monkeypatch.setattr(storage, "set_cursor_values", write)
    index_pass(dagster_instance, LONG_AGO)
    assert [t.new_job_id for t in story(dagster_instance, 1).touches] == [100, 103]
    assert [t.new_job_id for t in story(dagster_instance, BUCKET_SIZE * 7).touches] == [104]


def test_a_target_listed_run_after_run_is_one_streak(dagster_instance):
    for _ in range(5):
        audit(dagster_instance, exhausted=[2])
    update_index(dagster_instance, LONG_AGO, batch=2)  # across passes too
    [streak] = story(dagster_instance, 2).touches
    assert (streak.action, streak.times) == (EXHAUSTED, 5)
    assert streak.first_at <= streak.at


def test_events_not_indexed_yet_are_read_from_the_tail(dagster_instance):
    audit(dagster_instance, recovered=[(1, 100)])
    update_index(dagster_instance, LONG_AGO)
    audit(dagster_instance, recovered=[(1, 105)])
    read = story(dagster_instance, 1)
    assert [t.new_job_id for t in read.touches] == [100, 105]
    assert (read.tail_events, read.behind) == (1, False)
    for job in (106, 107):
        audit(dagster_instance, recovered=[(1, job)])
    assert story(dagster_instance, 1, tail_limit=2).behind  # says the index is behind


def test_without_an_index_the_story_says_so(dagster_instance):
    audit(dagster_instance, recovered=[(1, 100)])
    read = story(dagster_instance, 1)
    assert not read.indexed and [t.new_job_id for t in read.touches] == [100]


def test_touches_before_the_retention_horizon_are_dropped(dagster_instance):
    audit(dagster_instance, recovered=[(1, 100)])
    tomorrow = datetime.now(UTC) + timedelta(days=1)
    update_index(dagster_instance, tomorrow)
    assert story(dagster_instance, 1, horizon=LONG_AGO).touches == []  # not kept in the index
    audit(dagster_instance, recovered=[(1, 101)])
    assert story(dagster_instance, 1, horizon=tomorrow).touches == []  # nor read from the tail


def test_a_target_keeps_its_newest_touches_only(dagster_instance, monkeypatch):
    monkeypatch.setattr(audit_index, "MAX_TOUCHES_PER_TARGET", 3)
    for job in range(100, 106):
        audit(dagster_instance, recovered=[(1, job)])
    update_index(dagster_instance, LONG_AGO)
    assert [t.new_job_id for t in story(dagster_instance, 1).touches] == [103, 104, 105]
