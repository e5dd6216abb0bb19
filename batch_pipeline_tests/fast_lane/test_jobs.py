"""The fast lane in Dagster: fast_heal_sensor's ticks and fast_heal_job's materializations,
against a real SAN database and a real Dagster instance."""

import uuid
from datetime import datetime, timedelta

import pytest
from dagster import (
    AssetKey,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    RunRequest,
    SkipReason,
    build_sensor_context,
)

from batch_pipeline.definitions import defs
from batch_pipeline.fast_lane.assets import REANNOUNCEMENTS_ASSET, RETRIES_ASSET
from batch_pipeline.fast_lane.config import FastHealConfig, grace_default, reannounce_default
from batch_pipeline.fast_lane.jobs import fast_heal_job
from batch_pipeline.fast_lane.rules import LaneWindow
from batch_pipeline.fast_lane.sensors import FOUND_TAG, fast_heal_sensor, run_config
from batch_pipeline.recovery.config import RecoveryConfig
from batch_pipeline.san.resources import JobDispatcherResource, SanDatabase
from batch_pipeline.san.schema import create_recommended_indexes
from batch_pipeline.san.tables import CARD_ANALYSIS, FAILED, PENDING
from batch_pipeline_tests.conftest import job_notifications
from batch_pipeline_tests.runs import (
    KILLED,
    KillsItsOwnConnectionOnce,
    latest_metadata,
    run_recovery,
)


def resources(db, dispatcher="none", channel="san_jobs"):
    return {
        "san_database": SanDatabase(url=db.url),
        "job_dispatcher": JobDispatcherResource(kind=dispatcher, notify_channel=channel),
    }


def tick(db, instance, cursor=None, dispatcher="none", indexes=True):
    if indexes:  # as a production database has them (the sensor probes only with them)
        create_recommended_indexes(db.engine)
    with build_sensor_context(
        instance=instance, cursor=cursor, resources=resources(db, dispatcher)
    ) as context:
        return fast_heal_sensor(context), context.cursor


def failed_scrap(db, failed_ago=timedelta(minutes=3)):
    scrap = db.scrap(db.user(), created_at=db.ago(minutes=30))
    db.job(
        CARD_ANALYSIS,
        scrap,
        FAILED,
        created_at=db.now - failed_ago - timedelta(seconds=30),
        updated_at=db.now - failed_ago,
    )
    return scrap


def test_a_tick_with_nothing_to_heal_requests_no_run_and_says_why(san_db):
    instance = DagsterInstance.ephemeral()
    result, cursor = tick(san_db, instance)
    assert isinstance(result, SkipReason) and result.skip_message.startswith("nothing to heal")
    assert datetime.fromisoformat(cursor)  # the next window starts where this one ended


def test_a_tick_that_finds_a_failed_target_requests_one_run_with_its_window(san_db):
    failed_scrap(san_db)
    instance = DagsterInstance.ephemeral()
    request, cursor = tick(san_db, instance)
    assert isinstance(request, RunRequest)
    assert request.run_key == f"fast_heal:{cursor}"
    assert request.run_config["ops"]["fast_heal"]["config"]["window_until"] == cursor
    assert request.tags[FOUND_TAG] == "1"  # what the probe found, for the audit of the lane's runs


def test_while_a_fast_heal_run_is_in_flight_the_sensor_waits_and_keeps_its_window(san_db):
    failed_scrap(san_db)
    instance = DagsterInstance.ephemeral()
    instance.add_run(
        DagsterRun(
            job_name=fast_heal_job.name, run_id=str(uuid.uuid4()), status=DagsterRunStatus.STARTED
        )
    )
    result, cursor = tick(san_db, instance, cursor="2026-01-01T00:00:00+00:00")
    assert isinstance(result, SkipReason) and "still healing" in result.skip_message
    assert cursor == "2026-01-01T00:00:00+00:00"


def run_fast_heal(db, instance, window=None, dispatcher="none", channel="san_jobs", config=None):
    run_conf = run_config(window) if window else {"ops": {"fast_heal": {"config": {}}}}
    run_conf["ops"]["fast_heal"]["config"].update(config or {})
    result = defs.resolve_job_def(fast_heal_job.name).execute_in_process(
        run_config=run_conf,
        resources=resources(db, dispatcher, channel),
        instance=instance,
        raise_on_error=False,
    )
    return result


def test_a_fast_heal_run_re_announces_and_retries_and_records_both_on_its_assets(pg_db):
    scrap = failed_scrap(pg_db)
    unclaimed = pg_db.job(
        CARD_ANALYSIS, pg_db.scrap(pg_db.user()), created_at=pg_db.now - timedelta(seconds=70)
    )
    instance = DagsterInstance.ephemeral()
    window = LaneWindow(since=pg_db.now - timedelta(seconds=30), until=pg_db.now)
    with job_notifications(pg_db) as heard:
        result = run_fast_heal(
            pg_db, instance, window, dispatcher="pg_notify", channel=heard.channel
        )
    assert result.success
    new_job = [job for job in pg_db.jobs(status=PENDING) if job.target_id == scrap]
    assert len(new_job) == 1
    assert sorted(event["job_id"] for event in heard) == sorted([unclaimed, new_job[0].id])
    announced = latest_metadata(instance, REANNOUNCEMENTS_ASSET)
    assert announced["announced"] == 1 and announced["announced_job_ids"] == [unclaimed]
    assert 60 <= announced["heal_age_max_seconds"] < 120
    retried = latest_metadata(instance, RETRIES_ASSET)
    assert retried["enqueued"] == 1 and retried["recovered"] == [
        {"area": "orphan_scrap_recovery", "scrap_id": scrap, "new_job_id": new_job[0].id}
    ]
    # seconds since the failure, not since the save
    assert 170 <= retried["heal_age_median_seconds"] < 300


def test_a_dry_run_writes_and_announces_nothing_and_materializes_nothing(san_db):
    failed_scrap(san_db)
    instance = DagsterInstance.ephemeral()
    result = run_fast_heal(san_db, instance, config={"dry_run": True})
    assert result.success and san_db.jobs(status=PENDING) == []
    assert instance.get_latest_materialization_event(AssetKey(RETRIES_ASSET)) is None


def test_recovery_job_materializations_carry_the_time_the_healed_targets_waited(san_db):
    scrap = san_db.scrap(san_db.user(), created_at=san_db.ago(hours=3))
    # a ghost, stale for 1 h
    san_db.job(CARD_ANALYSIS, scrap, PENDING, created_at=san_db.ago(hours=1))
    result, instance = run_recovery(san_db)
    assert result.success
    ghost = latest_metadata(instance, "ghost_job_recovery")
    assert (
        3590 <= ghost["heal_age_max_seconds"] <= 3700
        and ghost["heal_age_median_seconds"] == ghost["heal_age_max_seconds"]
    )
    # healed nothing
    assert "heal_age_median_seconds" not in latest_metadata(instance, "orphan_scrap_recovery")


def test_the_lane_and_recovery_job_share_their_defaults():
    lane, recovery = FastHealConfig(), RecoveryConfig()
    assert lane.max_attempts == recovery.max_attempts
    assert lane.stale_pending_after_minutes == recovery.stale_pending_after_minutes
    assert lane.orphan_min_age_minutes == recovery.orphan_min_age_minutes


def test_the_switches_are_read_from_the_environment_and_a_bad_value_names_itself(monkeypatch):
    monkeypatch.setenv("SAN_REANNOUNCE", "off")
    assert reannounce_default() is False
    monkeypatch.setenv("SAN_REANNOUNCE", "maybe")
    with pytest.raises(ValueError, match="SAN_REANNOUNCE='maybe' must be on or off"):
        reannounce_default()
    monkeypatch.setenv("SAN_FAST_LANE_ORPHAN_MIN_AGE_MINUTES", "2")
    assert grace_default() == 2
    monkeypatch.setenv("SAN_FAST_LANE_ORPHAN_MIN_AGE_MINUTES", "-1")
    with pytest.raises(ValueError, match="SAN_FAST_LANE_ORPHAN_MIN_AGE_MINUTES='-1'"):
        grace_default()


def test_a_window_without_a_utc_offset_is_refused_by_name():
    with pytest.raises(ValueError, match="window_until='2026-01-01T00:00:00' has no UTC offset"):
        FastHealConfig(window_until="2026-01-01T00:00:00").window(datetime.now().astimezone())


def test_a_tick_on_a_database_without_the_san_tables_fails_naming_what_is_missing(tmp_path):
    from dagster import Failure

    from batch_pipeline.san.database import create_san_engine
    from batch_pipeline_tests.conftest import SanDb

    url = f"sqlite:///{tmp_path / 'empty.sqlite'}"
    empty = SanDb(url, create_san_engine(url), "sqlite")
    with pytest.raises(Failure, match="jobs"):
        tick(empty, DagsterInstance.ephemeral(), indexes=False)


def test_without_its_indexes_the_lane_stays_off_on_postgresql_and_names_them(pg_db):
    failed_scrap(pg_db)  # something to heal, but probing it would read whole tables
    result, cursor = tick(pg_db, DagsterInstance.ephemeral(), indexes=False)
    assert isinstance(result, SkipReason) and "ix_san_jobs_failed_updated" in result.skip_message
    assert "create-indexes" in result.skip_message and cursor is None


def test_an_invalid_index_counts_as_missing(pg_db):
    from sqlalchemy import text

    from batch_pipeline.san.dialects.postgresql import missing_valid_indexes

    create_recommended_indexes(pg_db.engine)
    with pg_db.engine.begin() as conn:  # what an interrupted CREATE INDEX CONCURRENTLY leaves
        conn.execute(
            text(
                "UPDATE pg_index SET indisvalid = false WHERE indexrelid = "
                "to_regclass('ix_san_jobs_target')"
            )
        )
        assert missing_valid_indexes(
            conn, ["ix_san_jobs_active_created", "ix_san_jobs_target", "nope"]
        ) == ["ix_san_jobs_target", "nope"]


def test_a_killed_connection_in_a_fast_heal_run_keeps_its_audit_trail_exact(pg_db):
    """The lane's retry detects anew, so the targets the failed attempt enqueued are no longer
    due: without the failed attempt's observation they would appear in no materialization."""

    create_recommended_indexes(pg_db.engine)
    user = pg_db.user()
    saved = [
        pg_db.scrap(user, created_at=pg_db.ago(minutes=12), refined=True, card=False)
        for _ in range(6)
    ]
    KILLED.clear()
    instance = DagsterInstance.ephemeral()
    result = defs.resolve_job_def(fast_heal_job.name).execute_in_process(
        run_config={"ops": {"fast_heal": {"config": {"batch_size": 2}}}},
        instance=instance,
        raise_on_error=False,
        resources={
            "san_database": SanDatabase(url=pg_db.url),
            "job_dispatcher": KillsItsOwnConnectionOnce(admin_url=pg_db.url),
        },
    )
    assert KILLED and result.success
    assert [e.step_key for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"] == [
        "fast_heal"
    ]
    for scrap in saved:
        assert len(pg_db.jobs(target_id=scrap)) == 1  # an app death healed once, not twice
    retried = latest_metadata(instance, RETRIES_ASSET)
    assert (retried["enqueued"], retried["earlier_attempts"]) == (6, 1)
    assert retried["by_area"]["orphan_scrap_recovery"]["enqueued"] == 6
    assert sorted(r["scrap_id"] for r in retried["recovered"]) == sorted(saved)
    assert sorted(r["new_job_id"] for r in retried["recovered"]) == sorted(
        j.id for s in saved for j in pg_db.jobs(target_id=s)
    )
