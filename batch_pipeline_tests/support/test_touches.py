"""The audit trail read back per target: each reader reads what its writer records (the writers'
own report classes build the metadata here)."""

from batch_pipeline.fast_lane.announcements import AnnounceReport
from batch_pipeline.fast_lane.assets import REANNOUNCEMENTS_ASSET, RETRIES_ASSET
from batch_pipeline.fast_lane.retries import retries_metadata
from batch_pipeline.recovery.ghost_jobs import AREA as GHOST_AREA
from batch_pipeline.recovery.orphan_scraps import ORPHAN_SCRAPS
from batch_pipeline.recovery.plan import COMMITTED_BY_FAILED_ATTEMPT, RecoveryReport
from batch_pipeline.recovery.unwritten_tils import UNWRITTEN_TILS
from batch_pipeline.san.ops import as_metadata
from batch_pipeline.support.redrive import RedriveReport
from batch_pipeline.support.touches import (
    AUDITED_ASSETS,
    CLOSED_AS_GHOST,
    DEFERRED,
    EXHAUSTED,
    RE_ENQUEUED,
    REANNOUNCED,
    REDRIVE_ASSET,
    REDRIVEN,
    RETRIED,
    SKIPPED_BY_RACE,
    Event,
    Touch,
    touches_of,
)


def stored(metadata: dict) -> dict:
    """Metadata as an event log hands it back: MetadataValue.value."""
    return {key: getattr(value, "value", value) for key, value in as_metadata(metadata).items()}


def event(asset, metadata, observation=False, storage_id=7):
    return Event(asset, storage_id, 1_000.0, "run-1", stored(metadata), observation)


def said(touches):
    return sorted((t.kind, t.target_id, t.action, t.job_id, t.new_job_id) for t in touches)


def target_report(**lists):
    return RecoveryReport(area=ORPHAN_SCRAPS.area, dry_run=False, thresholds={}, **lists)


def test_a_target_recovery_says_what_it_did_to_each_scrap():
    report = target_report(
        recovered=[{"scrap_id": 1, "new_job_id": 90}],
        exhausted_ids=[2],
        deferred_ids=[3],
        skipped_by_race_ids=[4],
    )
    assert said(touches_of(event(ORPHAN_SCRAPS.area, report.metadata()))) == [
        ("scrap", 1, RE_ENQUEUED, None, 90),
        ("scrap", 2, EXHAUSTED, None, None),
        ("scrap", 3, DEFERRED, None, None),
        ("scrap", 4, SKIPPED_BY_RACE, None, None),
    ]


def test_the_unwritten_tils_recovery_touches_summaries():
    report = RecoveryReport(
        area=UNWRITTEN_TILS.area,
        dry_run=False,
        thresholds={},
        recovered=[{"summary_id": 5, "new_job_id": 91}],
    )
    assert said(touches_of(event(UNWRITTEN_TILS.area, report.metadata()))) == [
        ("summary", 5, RE_ENQUEUED, None, 91)
    ]


def test_ghost_recovery_touches_the_target_of_each_closed_job_and_names_both_jobs():
    report = RecoveryReport(
        area=GHOST_AREA,
        dry_run=False,
        thresholds={},
        recovered=[
            {
                "failed_job_id": 10,
                "new_job_id": 11,
                "job_type": "CARD_ANALYSIS",
                "target_id": 3,
                "stale_status": "PENDING",
            },
            {
                "failed_job_id": 12,
                "new_job_id": None,
                "job_type": "TIL_GENERATION",
                "target_id": 4,
                "stale_status": "PROCESSING",
            },
            {
                "failed_job_id": 13,
                "new_job_id": 14,
                "job_type": "SOMETHING_NEW",
                "target_id": 5,
                "stale_status": "PENDING",
            },
        ],
        deferred_ids=[20],
    )
    touches = touches_of(event(GHOST_AREA, report.metadata()))
    assert said(touches) == [
        ("job", 13, CLOSED_AS_GHOST, 13, 14),  # a type no recovery heals: the job's own story
        ("job", 20, DEFERRED, None, None),
        ("scrap", 3, CLOSED_AS_GHOST, 10, 11),
        ("summary", 4, CLOSED_AS_GHOST, 12, None),
    ]
    assert "no replacement" in next(t for t in touches if t.target_id == 4).note


def test_the_fast_lane_retries_and_announcements():
    lane = target_report(recovered=[{"scrap_id": 1, "new_job_id": 92}], skipped_by_race_ids=[6])
    retried = retries_metadata([lane])
    assert said(touches_of(event(RETRIES_ASSET, retried))) == [
        ("scrap", 1, RETRIED, None, 92),
        ("scrap", 6, SKIPPED_BY_RACE, None, None),
    ]
    announced = AnnounceReport(detected=2, announced=2, announced_ids=[30, 31]).metadata()
    assert said(touches_of(event(REANNOUNCEMENTS_ASSET, announced))) == [
        ("job", 30, REANNOUNCED, 30, None),
        ("job", 31, REANNOUNCED, 31, None),
    ]


def test_a_redrive_names_who_asked_and_why():
    report = RedriveReport(
        area=ORPHAN_SCRAPS.area,
        dry_run=False,
        filter="x",
        max_attempts=10,
        asked_by="cli ops@host",
        reason="AI fix 2.3.1",
        redriven=[
            {
                "area": ORPHAN_SCRAPS.area,
                "target_id": 8,
                "new_job_id": 93,
                "attempts_before": 10,
                "last_job_id": 50,
                "last_error": "x",
            }
        ],
    )
    [touch] = touches_of(event(REDRIVE_ASSET, report.metadata()))
    assert (touch.kind, touch.target_id, touch.action, touch.new_job_id) == (
        "scrap",
        8,
        REDRIVEN,
        93,
    )
    assert "its job 11, beyond max_attempts 10" in touch.note
    assert "cli ops@host: AI fix 2.3.1" in touch.note


def test_a_dry_run_touched_nothing():
    report = target_report(exhausted_ids=[2])
    report.dry_run = True
    assert touches_of(event(ORPHAN_SCRAPS.area, report.metadata(), observation=True)) == []


def test_work_committed_by_a_failed_attempt_counts_and_says_so():
    report = target_report(recovered=[{"scrap_id": 1, "new_job_id": 90}])
    observed = {
        COMMITTED_BY_FAILED_ATTEMPT: 0,
        "areas": [report.committed_metadata(failed_attempt=0)],
    }
    [touch] = touches_of(event(ORPHAN_SCRAPS.area, observed, observation=True))
    assert touch.committed_by_failed_attempt and touch.action == RE_ENQUEUED
    lane = {COMMITTED_BY_FAILED_ATTEMPT: 0, "areas": [report.committed_metadata(0)]}
    [touch] = touches_of(event(RETRIES_ASSET, lane, observation=True))
    assert touch.action == RETRIED


def test_a_touch_survives_its_json_and_every_audited_asset_has_a_reader():
    touch = Touch("scrap", 1, EXHAUSTED, ORPHAN_SCRAPS.area, 7, 1.5, "run", times=3, first_at=1.0)
    assert Touch.from_json(touch.to_json()) == touch
    assert set(AUDITED_ASSETS) >= {GHOST_AREA, RETRIES_ASSET, REANNOUNCEMENTS_ASSET, REDRIVE_ASSET}
