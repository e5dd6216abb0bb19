"""explain end to end: real runs of recovery_job, fast_heal_job, the fast lane's sensor, the TIL
and a redrive on a real Dagster instance; then each target's story lists the runs that touched
it, what they did, with a link; on both dialects."""

import json
from contextlib import nullcontext
from datetime import timedelta

from dagster import DagsterInstance

from batch_pipeline.fast_lane.assets import REANNOUNCEMENTS_ASSET, RETRIES_ASSET
from batch_pipeline.recovery.ghost_jobs import AREA as GHOST_AREA
from batch_pipeline.recovery.orphan_scraps import ORPHAN_SCRAPS
from batch_pipeline.san.tables import CARD_ANALYSIS, PENDING
from batch_pipeline.support.audit_index import retention_horizon, update_index
from batch_pipeline.support.explain import (
    CREATED_BY_TIL,
    as_json,
    as_markdown,
    as_text,
    explain,
)
from batch_pipeline.support.story import EXHAUSTED as EXHAUSTED_STATE
from batch_pipeline.support.touches import (
    CLOSED_AS_GHOST,
    EXHAUSTED,
    REANNOUNCED,
    REDRIVE_ASSET,
    REDRIVEN,
    RETRIED,
)
from batch_pipeline.til.auto_generation import AREA as TIL_AREA
from batch_pipeline_tests.conftest import job_notifications
from batch_pipeline_tests.runs import (
    at,
    recent_start,
    run_fast_heal,
    run_recovery,
    run_redrive,
    run_til,
    tick,
)
from batch_pipeline_tests.support.conftest import exhausted_scrap, failed_jobs


def index(instance):
    update_index(instance, retention_horizon(None, 90))


def said(explanation):
    return [(t.asset, t.action, t.run_id) for t in explanation.touches]


def test_each_story_lists_the_runs_that_touched_it(san_db):
    instance = DagsterInstance.ephemeral()
    user = san_db.user()
    lost = san_db.scrap(user, created_at=san_db.ago(hours=1))
    unclaimed = san_db.job(CARD_ANALYSIS, lost, created_at=san_db.now - timedelta(seconds=12))
    ghost_scrap = san_db.scrap(user, created_at=san_db.ago(hours=3))
    ghost = san_db.job(CARD_ANALYSIS, ghost_scrap, PENDING, created_at=san_db.ago(minutes=45))
    failed = san_db.scrap(user, created_at=san_db.ago(hours=1))
    failed_jobs(san_db, failed, 1, last_failed_ago=timedelta(minutes=3))
    poison, _ = exhausted_scrap(san_db)

    # re-announcements need a dispatcher: pg_notify on PostgreSQL (none is SQLite's default)
    announcing = san_db.kind == "postgres"
    with job_notifications(san_db) if announcing else nullcontext() as heard:
        sensor_result, _ = tick(
            san_db,
            instance,
            cursor=recent_start(san_db),
            dispatcher="pg_notify" if announcing else "none",
            channel=heard.channel if announcing else "san_jobs",
        )
    assert bool(sensor_result.asset_events) is announcing
    for event in sensor_result.asset_events:  # what the sensor daemon stores of a tick's result
        instance.report_runless_asset_event(event)
    lane = run_fast_heal(san_db, instance)
    recovery, _ = run_recovery(san_db, instance)
    index(instance)  # part of the story indexed, the redrive's left to the tail
    redrive = run_redrive(
        san_db,
        instance,
        {"area": ORPHAN_SCRAPS.area, "dry_run": False, "reason": "AI fix"},
        tags={"batch_pipeline/asked_by": "ops@san"},
    )
    assert lane.success and recovery.success and redrive.success

    told = explain(san_db.engine, instance, "scrap", lost)
    if announcing:
        assert said(told) == [(REANNOUNCEMENTS_ASSET, REANNOUNCED, "")]
        assert told.touches[0].job_id == unclaimed
        assert "/assets/fast_lane_reannouncements" in as_text(told)  # a sensor tick: no run
    else:
        assert said(told) == []

    told = explain(san_db.engine, instance, "scrap", ghost_scrap)
    assert said(told) == [(GHOST_AREA, CLOSED_AS_GHOST, recovery.run_id)]
    assert told.touches[0].job_id == ghost and told.touches[0].new_job_id is not None
    assert f"/runs/{recovery.run_id}" in as_text(told)

    told = explain(san_db.engine, instance, "scrap", failed)
    assert said(told) == [(RETRIES_ASSET, RETRIED, lane.run_id)]

    told = explain(san_db.engine, instance, "scrap", poison)
    assert said(told) == [
        (ORPHAN_SCRAPS.area, EXHAUSTED, recovery.run_id),
        (REDRIVE_ASSET, REDRIVEN, redrive.run_id),
    ]
    assert "ops@san: AI fix" in told.touches[1].note
    assert told.audit.tail_events >= 1  # the redrive came after the index pass


def test_a_summary_story_names_the_til_run_that_created_it(san_db):
    user = san_db.user()
    san_db.scrap(user, created_at=at("2026-11-28", 9), card=True)
    result, instance = run_til(san_db, "2026-11-28")
    assert result.success
    [summary] = san_db.summaries()
    told = explain(san_db.engine, instance, "summary", summary.id)
    assert said(told) == [(TIL_AREA, CREATED_BY_TIL, result.run_id)]
    assert [job.job_type for job in told.story.jobs] == ["TIL_GENERATION"]


def test_the_three_renderings_carry_the_same_story(san_db):
    poison, jobs_of_it = exhausted_scrap(san_db)
    recovery, instance = run_recovery(san_db)
    index(instance)
    told = explain(san_db.engine, instance, "job", jobs_of_it[0])
    text, markdown = as_text(told), as_markdown(told)
    machine = json.loads(as_json(told))
    for rendering in (text, markdown):
        assert f"scrap {poison}" in rendering and "exhausted: 10 of max_attempts 10" in rendering
        assert recovery.run_id[:8] in rendering
    assert markdown.count("| CARD_ANALYSIS | FAILED |") == 10
    assert machine["target"]["id"] == poison and machine["target"]["asked_about_job"]
    assert [v["state"] for v in machine["verdicts"] if v["job_type"] == CARD_ANALYSIS] == [
        EXHAUSTED_STATE
    ]
    assert machine["runs"][0]["run_id"] == recovery.run_id
    assert machine["runs"][0]["link"].endswith(f"/runs/{recovery.run_id}")


def test_without_an_instance_the_story_from_san_is_told_and_says_what_is_missing(san_db):
    poison, _ = exhausted_scrap(san_db)
    told = explain(san_db.engine, None, "scrap", poison, instance_problem="DAGSTER_HOME is not set")
    assert not told.complete and told.touches == []
    assert len(told.story.jobs) == 10
    assert "runs that touched it: unknown (DAGSTER_HOME is not set)" in as_text(told)


def test_an_instance_whose_storage_fails_is_named_and_the_story_still_told(san_db, monkeypatch):
    poison, _ = exhausted_scrap(san_db)
    instance = DagsterInstance.ephemeral()

    def unreachable(keys):
        raise ConnectionError("connection to server at 10.0.0.5 refused")

    monkeypatch.setattr(instance.daemon_cursor_storage, "get_cursor_values", unreachable)
    told = explain(san_db.engine, instance, "scrap", poison)
    assert told.dagster_problem == (
        "the Dagster instance could not be read: connection to server at 10.0.0.5 refused"
    )
    assert told.story.verdicts
