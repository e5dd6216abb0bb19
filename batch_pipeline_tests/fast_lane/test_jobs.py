"""The fast lane in Dagster: fast_heal_sensor's ticks (they announce again themselves, and
record it) and fast_heal_job's runs (the retries), against a real SAN database and a real Dagster
instance."""

import json
import uuid
from datetime import timedelta

import pytest
from dagster import (
    AssetKey,
    AssetMaterialization,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    Failure,
    RunRequest,
)
from sqlalchemy import text

from batch_pipeline.definitions import defs
from batch_pipeline.fast_lane.assets import REANNOUNCEMENTS_ASSET, RETRIES_ASSET
from batch_pipeline.fast_lane.config import FastHealConfig, grace_default, reannounce_default
from batch_pipeline.fast_lane.jobs import fast_heal_job
from batch_pipeline.fast_lane.sensors import FOUND_TAG, LAST_ROUND_KEY
from batch_pipeline.fast_lane.tick import LaneState
from batch_pipeline.recovery.config import RecoveryConfig
from batch_pipeline.san.database import create_san_engine
from batch_pipeline.san.dialects.postgresql import missing_valid_indexes
from batch_pipeline.san.resources import SanDatabase
from batch_pipeline.san.schema import create_recommended_indexes
from batch_pipeline.san.tables import CARD_ANALYSIS, FAILED, PENDING
from batch_pipeline_tests.conftest import (
    ODD_SESSION_DEFAULTS,
    SanDb,
    job_notifications,
    with_session_defaults,
)
from batch_pipeline_tests.runs import (
    KILLED,
    KillsItsOwnConnectionOnce,
    latest_metadata,
    recent_start,
    run_fast_heal,
    run_recovery,
    tick,
)


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


def unclaimed(db):
    """A PENDING job whose event was lost, 12 s old: due at the 10 s step."""
    return db.job(CARD_ANALYSIS, 10_000, created_at=db.now - timedelta(seconds=12))


def test_a_tick_with_nothing_to_heal_requests_no_run_and_says_why(san_db):
    result, cursor = tick(san_db, DagsterInstance.ephemeral())
    assert result.skip_reason.skip_message.startswith("nothing to heal")
    assert result.run_requests == [] and result.asset_events == []
    assert LaneState.from_json(cursor).until is not None  # the next window starts here


def test_a_tick_that_finds_a_failed_target_requests_one_run(san_db):
    failed_scrap(san_db)
    result, _cursor = tick(san_db, DagsterInstance.ephemeral())
    [request] = result.run_requests
    assert isinstance(request, RunRequest) and request.run_key.startswith("fast_heal:")
    assert request.tags[FOUND_TAG] == "1"  # what the probe found, for the audit of the lane's runs


def test_the_sensor_announces_again_itself_and_records_it_without_a_run(pg_db):
    job = unclaimed(pg_db)
    instance = DagsterInstance.ephemeral()
    with job_notifications(pg_db) as heard:
        result, cursor = tick(
            pg_db, instance, recent_start(pg_db), dispatcher="pg_notify", channel=heard.channel
        )
    assert [event["job_id"] for event in heard] == [job]
    assert result.run_requests == []  # a re-announcement writes no row: no run
    [event] = result.asset_events
    assert isinstance(event, AssetMaterialization) and event.asset_key == AssetKey(
        REANNOUNCEMENTS_ASSET
    )
    metadata = {key: value.value for key, value in event.metadata.items()}
    assert (metadata["announced"], metadata["announced_job_ids"]) == (1, [job])
    assert metadata["threshold_seconds"] == 10 and metadata["round"] == 1
    assert LaneState.from_json(cursor).round == 1
    stored = json.loads(
        instance.daemon_cursor_storage.get_cursor_values({LAST_ROUND_KEY})[LAST_ROUND_KEY]
    )
    assert stored["round"] == 1


def test_a_round_whose_tick_result_was_lost_is_recorded_by_the_next_and_not_announced_again(pg_db):
    """The first tick announces (committed) but its result never reaches the daemon's storage
    (the daemon dies): the next tick starts from the old cursor."""
    job = unclaimed(pg_db)
    instance = DagsterInstance.ephemeral()
    old_cursor = recent_start(pg_db)
    with job_notifications(pg_db) as heard:
        first, _lost = tick(
            pg_db, instance, old_cursor, dispatcher="pg_notify", channel=heard.channel
        )
        second, cursor = tick(
            pg_db, instance, old_cursor, dispatcher="pg_notify", channel=heard.channel
        )
    assert [event["job_id"] for event in heard] == [job]  # once, not twice
    [recorded] = second.asset_events
    metadata = {key: value.value for key, value in recorded.metadata.items()}
    assert metadata["recorded_by_a_later_tick"] is True and metadata["announced_job_ids"] == [job]
    assert LaneState.from_json(cursor).round == 1


def test_while_a_fast_heal_run_is_in_flight_no_second_run_but_announcements_go_on(pg_db):
    failed_scrap(pg_db)
    job = unclaimed(pg_db)
    instance = DagsterInstance.ephemeral()
    instance.add_run(
        DagsterRun(
            job_name=fast_heal_job.name, run_id=str(uuid.uuid4()), status=DagsterRunStatus.STARTED
        )
    )
    with job_notifications(pg_db) as heard:
        result, cursor = tick(
            pg_db, instance, recent_start(pg_db), dispatcher="pg_notify", channel=heard.channel
        )
    assert result.run_requests == [] and "still healing" in result.skip_reason.skip_message
    assert [event["job_id"] for event in heard] == [job]
    assert LaneState.from_json(cursor).until > LaneState.from_json(recent_start(pg_db)).until


def test_a_fast_heal_run_retries_and_records_it_on_its_asset(pg_db):
    scrap = failed_scrap(pg_db)
    instance = DagsterInstance.ephemeral()
    with job_notifications(pg_db) as heard:
        result = run_fast_heal(pg_db, instance, dispatcher="pg_notify", channel=heard.channel)
    assert result.success
    [new_job] = [job for job in pg_db.jobs(status=PENDING) if job.target_id == scrap]
    assert [event["job_id"] for event in heard] == [new_job.id]
    retried = latest_metadata(instance, RETRIES_ASSET)
    assert retried["enqueued"] == 1 and retried["recovered"] == [
        {"area": "orphan_scrap_recovery", "scrap_id": scrap, "new_job_id": new_job.id}
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
    assert lane.orphan_min_age_minutes == recovery.orphan_min_age_minutes


def test_the_switches_are_read_from_the_environment_and_a_bad_value_names_itself(monkeypatch):
    monkeypatch.setenv("SAN_REANNOUNCE", "off")
    assert reannounce_default() is False
    monkeypatch.setenv("SAN_REANNOUNCE", "maybe")
    with pytest.raises(ValueError, match="SAN_REANNOUNCE='maybe' must be on or off"):
        reannounce_default()
    monkeypatch.setenv("SAN_FAST_LANE_ORPHAN_MIN_AGE_MINUTES", "2")
    assert grace_default() == 2
    for wrong in ("-1", "0", "100000000"):
        monkeypatch.setenv("SAN_FAST_LANE_ORPHAN_MIN_AGE_MINUTES", wrong)
        with pytest.raises(ValueError, match=f"SAN_FAST_LANE_ORPHAN_MIN_AGE_MINUTES='{wrong}'"):
            grace_default()


def test_a_tick_on_a_database_without_the_san_tables_fails_naming_what_is_missing(tmp_path):
    url = f"sqlite:///{tmp_path / 'empty.sqlite'}"
    empty = SanDb(url, create_san_engine(url), "sqlite")
    with pytest.raises(Failure, match="jobs"):
        tick(empty, DagsterInstance.ephemeral(), indexes=False)


def test_without_its_indexes_the_lane_runs_on_small_tables_and_stays_off_on_larger_ones(
    pg_db, monkeypatch
):
    from batch_pipeline.fast_lane import sensors

    scrap = failed_scrap(pg_db)  # something to heal
    result, _cursor = tick(pg_db, DagsterInstance.ephemeral(), indexes=False)
    assert [request.tags[FOUND_TAG] for request in result.run_requests] == ["1"]  # tiny: reads all
    assert scrap
    monkeypatch.setattr(sensors, "SMALL_TABLES_BYTES", 1024)  # as if the tables had grown
    result, cursor = tick(pg_db, DagsterInstance.ephemeral(), indexes=False)
    message = result.skip_reason.skip_message
    assert "ix_san_jobs_failed_updated" in message and "create-indexes" in message
    assert result.run_requests == [] and LaneState.from_json(cursor).round == 0


def test_an_invalid_index_counts_as_missing(pg_db):
    create_recommended_indexes(pg_db.engine)
    with pg_db.engine.begin() as conn:  # what an interrupted CREATE INDEX CONCURRENTLY leaves
        conn.execute(
            text(
                "UPDATE pg_index SET indisvalid = false WHERE indexrelid = "
                "to_regclass('ix_san_jobs_target')"
            )
        )
        assert missing_valid_indexes(
            conn, ["ix_san_jobs_active_covering", "ix_san_jobs_target", "nope"]
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


@pytest.mark.parametrize(
    "field,value",
    [
        ("retry_after_seconds", 10**9),
        ("orphan_min_age_minutes", 10**9),
        ("max_attempts", 10**9),
        ("max_enqueue_per_tick", 10**12),
        ("batch_size", 0),
    ],
)
def test_a_run_config_value_out_of_range_fails_before_any_write_naming_the_field(
    san_db, field, value
):
    failed_scrap(san_db)
    before = san_db.jobs()
    result = run_fast_heal(san_db, DagsterInstance.ephemeral(), config={field: value})
    assert not result.success and san_db.jobs() == before
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    error = failure.step_failure_data.error
    assert field in error.message + (error.cause.message if error.cause else "")


def test_a_role_whose_sessions_read_dates_the_sql_dmy_way_still_probes_and_announces(pg_db):
    job = unclaimed(pg_db)
    odd = SanDb(with_session_defaults(pg_db.url, ODD_SESSION_DEFAULTS), pg_db.engine, "postgres")
    with job_notifications(pg_db) as heard:
        result, _cursor = tick(
            odd, DagsterInstance.ephemeral(), recent_start(pg_db), "pg_notify", heard.channel
        )
    assert [event["job_id"] for event in heard] == [job] and result.asset_events
