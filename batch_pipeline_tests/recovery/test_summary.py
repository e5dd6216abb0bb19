"""What a recovery run healed, told first: the sentence, the table, the counts, the run's tag."""

from dagster import AssetKey, TableMetadataValue

from batch_pipeline.recovery.ghost_jobs import GHOST_JOB_RECOVERY
from batch_pipeline.recovery.orphan_scraps import ORPHAN_SCRAPS
from batch_pipeline.recovery.plan import RecoveryReport
from batch_pipeline.recovery.registry import RECOVERIES
from batch_pipeline.recovery.summary import (
    COUNT_ORDER,
    DRY_RUN,
    HEALED_TAG,
    NOTHING_HEALED,
    audit_metadata,
    duration,
    healed_sentence,
    run_summary,
)
from batch_pipeline.san.tables import CARD_ANALYSIS, PENDING, PROCESSING
from batch_pipeline_tests.runs import run_recovery, shown_first

NOUNS = [recovery.noun for recovery in RECOVERIES]


def test_a_recovery_run_s_materialization_opens_with_what_it_healed_and_the_run_says_so(san_db):
    user = san_db.user()
    pending = san_db.job(CARD_ANALYSIS, 1001, PENDING, created_at=san_db.ago(hours=2))
    processing = san_db.job(
        CARD_ANALYSIS,
        1002,
        PROCESSING,
        created_at=san_db.ago(hours=3),
        started_at=san_db.ago(hours=2),
    )
    orphans = [san_db.scrap(user, created_at=san_db.ago(hours=1), card=False) for _ in range(3)]
    result, instance = run_recovery(san_db)
    assert result.success

    event = instance.get_latest_materialization_event(AssetKey("ghost_job_recovery"))
    metadata = event.asset_materialization.metadata
    keys = list(metadata)
    assert keys[:2] == ["summary", "healed"]
    sentence = metadata["summary"].value
    assert sentence.startswith("Healed 2 ghost jobs (jobs PENDING > 30 min")
    assert "waited 2 h (median), up to 2 h (by SAN's database clock)" in sentence
    table = metadata["healed"]
    assert isinstance(table, TableMetadataValue)
    rows = {row.data["failed_job_id"]: row.data for row in table.records}
    assert set(rows) == {pending, processing}
    assert rows[pending]["rule"] == "stale in PENDING > 30 min"
    assert rows[processing]["rule"] == "stale in PROCESSING > 1 h"
    assert all(row["new_job_id"] for row in rows.values())
    # the counts next, what was healed first and the rarely non-zero last
    counts = [key for key in keys if key in COUNT_ORDER]
    assert counts == [key for key in COUNT_ORDER if key in counts]
    assert keys.index("enqueued") < keys.index("deferred") < keys.index("announce_failures")

    orphan_table = instance.get_latest_materialization_event(
        AssetKey(ORPHAN_SCRAPS.area)
    ).asset_materialization.metadata["healed"]
    assert sorted(row.data["scrap_id"] for row in orphan_table.records) == sorted(orphans)
    assert {row.data["rule"] for row in orphan_table.records} == {
        "with no knowledge card, no active job"
    }

    run = instance.get_run_by_id(result.run_id)
    assert run.tags[HEALED_TAG] == "2 ghost jobs, 3 orphan scraps"
    # the first tag the run list shows (in key order; dagster/ tags are hidden by default)
    assert shown_first(run.tags) == HEALED_TAG


def test_a_run_that_healed_nothing_says_nothing(san_db):
    result, instance = run_recovery(san_db)
    assert result.success
    assert instance.get_run_by_id(result.run_id).tags[HEALED_TAG] == NOTHING_HEALED
    metadata = instance.get_latest_materialization_event(
        AssetKey("ghost_job_recovery")
    ).asset_materialization.metadata
    assert "healed" not in metadata
    assert metadata["summary"].value.startswith("Nothing healed: no ghost jobs to enqueue")


def test_a_dry_run_says_so_in_the_run_list(san_db):
    san_db.job(CARD_ANALYSIS, 1001, PENDING, created_at=san_db.ago(hours=2))
    result, instance = run_recovery(san_db, config={"dry_run": True})
    assert result.success
    assert instance.get_run_by_id(result.run_id).tags[HEALED_TAG] == DRY_RUN


def test_the_sentence_names_what_was_left_and_why():
    report = RecoveryReport(
        area=ORPHAN_SCRAPS.area,
        dry_run=False,
        thresholds={},
        detected=9,
        enqueued=5,
        exhausted=2,
        deferred=1,
        skipped_by_race=1,
        heal_ages_seconds=[30.0, 90.0, 4000.0],
    )
    assert healed_sentence(ORPHAN_SCRAPS, report) == (
        f"Healed 5 orphan scraps ({ORPHAN_SCRAPS.rule_text}). 2 exhausted (at max_attempts: no "
        "new job; see redrive); 1 deferred to the next run (max_enqueue_per_run); 1 skipped: a "
        "worker changed them first. They had waited 1 min (median), up to 1 h 6 min (by SAN's "
        "database clock)."
    )
    report.dry_run = True
    assert healed_sentence(GHOST_JOB_RECOVERY, report).startswith(
        "Dry run, nothing written: would heal 9 ghost jobs"
    )
    assert list(audit_metadata(ORPHAN_SCRAPS, report))[0] == "summary"


def test_the_tag_keeps_the_registry_s_order_and_each_area_s_latest_count():
    assert run_summary(None, NOUNS, "ghost jobs", 0) == NOTHING_HEALED
    tag = run_summary(None, NOUNS, "orphan scraps", 8)
    tag = run_summary(tag, NOUNS, "ghost jobs", 19)
    assert tag == "19 ghost jobs, 8 orphan scraps"
    # a retried area sets its count again, never adds it twice
    assert run_summary(tag, NOUNS, "orphan scraps", 9) == "19 ghost jobs, 9 orphan scraps"
    tag = run_summary(tag, NOUNS, "unwritten TILs", 1)
    assert tag == "19 ghost jobs, 8 orphan scraps, 1 unwritten TIL"
    assert run_summary(tag, NOUNS, "orphan scraps", 1) == (
        "19 ghost jobs, 1 orphan scrap, 1 unwritten TIL"
    )
    assert run_summary(tag, NOUNS, "unrefined scraps", 19) == (
        "19 ghost jobs, 8 orphan scraps, 19 unrefined scraps, 1 unwritten TIL"
    )


def test_durations_are_rounded_to_what_a_reader_needs():
    assert [duration(s) for s in (40.4, 720, 3600, 6653.1, 90_000)] == [
        "40 s",
        "12 min",
        "1 h",
        "1 h 50 min",
        "25 h",
    ]
