"""recovery_job through Dagster: order, audit trail in the instance, config and input errors."""

import time

import pytest
from dagster import AssetKey, DagsterInstance
from dagster._core.errors import DagsterInvalidConfigError
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from batch_pipeline.definitions import defs
from batch_pipeline.recovery.assets import recovery_run_config, step_key
from batch_pipeline.recovery.config import RecoveryConfig
from batch_pipeline.recovery.registry import AREAS
from batch_pipeline.san.resources import JobDispatcherResource, SanDatabase
from batch_pipeline.san.tables import (
    CARD_ANALYSIS,
    FAILED,
    PENDING,
    PROCESSING,
    SCRAP_REFINE,
    TIL_GENERATION,
)
from batch_pipeline_tests.conftest import (
    ODD_SESSION_DEFAULTS,
    PG_WRITE_PATHS,
    job_notifications,
    san_database_on_path,
    with_session_defaults,
)
from batch_pipeline_tests.runs import (
    KILLED,
    KillsItsOwnConnectionOnce,
    broken_state,
    latest_metadata,
    run_recovery,
)
from batch_pipeline_tests.sweeps import small_chunks


def test_recovery_job_heals_every_area_and_records_the_audit_trail(san_db):
    ghost, ghost_scrap, orphan, unrefined, unwritten = broken_state(san_db)
    result, instance = run_recovery(san_db)
    assert result.success

    ghost_meta = latest_metadata(instance, "ghost_job_recovery")
    assert (
        ghost_meta["detected"],
        ghost_meta["enqueued"],
        ghost_meta["exhausted"],
        ghost_meta["deferred"],
    ) == (1, 1, 0, 0)
    [pair] = ghost_meta["recovered"]
    assert pair["failed_job_id"] == ghost and san_db.get_job(ghost).status == FAILED
    assert san_db.get_job(pair["new_job_id"]).retry_of_job_id == ghost
    assert ghost_meta["thresholds"]["stale_pending_after_minutes"] == 30

    # the ghost's scrap has an active job again, so orphan recovery leaves it alone
    orphan_meta = latest_metadata(instance, "orphan_scrap_recovery")
    assert [p["scrap_id"] for p in orphan_meta["recovered"]] == [orphan]
    assert san_db.get_job(orphan_meta["recovered"][0]["new_job_id"]).job_type == CARD_ANALYSIS
    assert (
        len(
            [
                j
                for j in san_db.jobs(target_id=ghost_scrap, job_type=CARD_ANALYSIS)
                if j.status == PENDING
            ]
        )
        == 1
    )

    refine_meta = latest_metadata(instance, "orphan_scrap_refine_recovery")
    assert [p["scrap_id"] for p in refine_meta["recovered"]] == [unrefined]
    assert refine_meta["dry_run"] is False

    til_meta = latest_metadata(instance, "til_generation_recovery")
    [pair] = til_meta["recovered"]
    assert (
        pair["summary_id"] == unwritten and til_meta["thresholds"]["orphan_min_age_minutes"] == 10
    )
    new = san_db.get_job(pair["new_job_id"])
    assert (new.job_type, new.target_id, new.status) == (TIL_GENERATION, unwritten, PENDING)
    assert len(san_db.jobs(status=PENDING)) == 4


def test_a_run_that_finds_nothing_records_zeros(san_db):
    result, instance = run_recovery(san_db)
    assert result.success
    for area in AREAS:
        meta = latest_metadata(instance, area)
        assert (
            meta["detected"],
            meta["enqueued"],
            meta["exhausted"],
            meta["deferred"],
            meta["skipped_by_race"],
        ) == (0,) * 5
        assert meta["recovered"] == []


def test_steps_run_in_the_design_order(san_db):
    result, _ = run_recovery(san_db)
    order = [
        event.step_key for event in result.all_events if event.event_type_value == "STEP_START"
    ]
    assert order == [
        step_key(name)
        for name in (
            "check_san_database",
            "detect_ghost_jobs",
            "recover_ghost_jobs",
            "detect_orphan_scraps",
            "recover_orphan_scraps",
            "detect_unrefined_scraps",
            "recover_unrefined_scraps",
            "detect_unwritten_tils",
            "recover_unwritten_tils",
            "check_recovery_health",
        )
    ]


def latest_observation(instance, area):
    [record] = instance.fetch_observations(AssetKey(area), limit=1).records
    return {key: value.value for key, value in record.asset_observation.metadata.items()}


def test_dry_run_writes_nothing_but_reports_as_an_observation_not_a_materialization(san_db):
    broken_state(san_db)
    before = san_db.jobs()
    result, instance = run_recovery(san_db, config={"dry_run": True})
    assert result.success
    assert san_db.jobs() == before
    for area in AREAS:
        meta = latest_observation(instance, area)
        assert meta["dry_run"] is True and meta["detected"] == 1 and meta["enqueued"] == 0
        # the materialization history (the asset page's plots) holds only runs that wrote
        assert instance.get_latest_materialization_event(AssetKey(area)) is None


def failure_message(result) -> str:
    [failure] = [event for event in result.all_events if event.event_type_value == "STEP_FAILURE"]
    assert failure.step_key == step_key("check_san_database")
    error = failure.step_failure_data.error
    return error.message + (error.cause.message if error.cause else "")


@pytest.mark.parametrize(
    "field,value",
    [
        ("stale_pending_after_minutes", 0),
        ("stale_processing_after_minutes", -5),
        ("orphan_min_age_minutes", 0),
        ("scrap_lookback_hours", -1),
        ("max_attempts", -1),
        ("max_enqueue_per_run", 0),
        ("batch_size", 0),
        ("batch_size", 50_001),
        ("lock_timeout_ms", 0),
        ("statement_timeout_ms", -1),
        # beyond what the arithmetic holds: now - 10**8 hours is before year 1
        ("scrap_lookback_hours", 10**8),
        ("stale_pending_after_minutes", 10**9),
        ("stale_processing_after_minutes", 10**9),
        ("orphan_min_age_minutes", 10**9),
        ("max_attempts", 10**9),
        ("max_enqueue_per_run", 10**12),
        ("lock_timeout_ms", 10**12),
        ("statement_timeout_ms", 10**12),
    ],
)
def test_an_invalid_threshold_fails_first_naming_the_field(san_db, field, value):
    broken_state(san_db)
    before = san_db.jobs()
    result, _ = run_recovery(san_db, config={field: value})
    assert not result.success
    assert field in failure_message(result)
    assert san_db.jobs() == before
    assert [e.step_key for e in result.all_events if e.event_type_value == "STEP_START"] == [
        step_key("check_san_database")
    ]


@pytest.mark.parametrize("field", sorted(RecoveryConfig.model_fields))
def test_a_config_value_of_the_wrong_type_is_refused_before_the_run_starts(san_db, field):
    broken_state(san_db)
    before = san_db.jobs()
    wrong = "maybe" if RecoveryConfig.model_fields[field].annotation is bool else "thirty"
    with pytest.raises(DagsterInvalidConfigError, match=field):
        run_recovery(san_db, config={field: wrong})
    assert san_db.jobs() == before


def test_an_unknown_config_field_is_refused_by_name(san_db):
    with pytest.raises(DagsterInvalidConfigError, match="stale_pending_minutes"):
        run_recovery(san_db, config={"stale_pending_minutes": 30})


def test_an_unreachable_database_fails_first_with_a_clear_error(tmp_path):
    result, _ = run_recovery(None, url="postgresql+psycopg://postgres@127.0.0.1:1/san")
    assert not result.success
    assert (
        "cannot connect to the SAN database at postgresql+psycopg://postgres@127.0.0.1:1/san"
        in failure_message(result)
    )
    assert [e.step_key for e in result.all_events if e.event_type_value == "STEP_START"] == [
        step_key("check_san_database")
    ]


def test_a_missing_column_fails_first_and_writes_nothing(pg_db):
    broken_state(pg_db)
    with pg_db.engine.begin() as conn:
        conn.execute(text("ALTER TABLE scraps DROP COLUMN refined_content"))
    before = pg_db.jobs()
    result, _ = run_recovery(pg_db)
    assert not result.success
    assert "column 'scraps.refined_content' is missing" in failure_message(result)
    assert pg_db.jobs() == before


def test_an_unknown_dispatcher_fails_first(san_db):
    result, _ = run_recovery(san_db, dispatcher="carrier-pigeon")
    assert not result.success
    assert "SAN_JOB_DISPATCHER='carrier-pigeon' is not a dispatcher" in failure_message(result)


@pytest.fixture(params=PG_WRITE_PATHS)
def pg_path_db(request, tmp_path):
    with san_database_on_path(request.param, tmp_path) as database:
        yield database


def test_pg_notify_is_the_default_on_postgres_and_announces_every_new_job_once(pg_path_db):
    # Each write path announces differently (the write statement itself with the target index,
    # a second statement without it); either way every new job is announced exactly once.
    broken_state(pg_path_db)
    second_ghost_scrap = pg_path_db.scrap(
        pg_path_db.user(), created_at=pg_path_db.ago(hours=3), card=True
    )
    pg_path_db.job(SCRAP_REFINE, second_ghost_scrap, PENDING, created_at=pg_path_db.ago(hours=1))
    with job_notifications(pg_path_db) as payloads:
        result = defs.resolve_job_def("recovery_job").execute_in_process(
            resources={
                "san_database": SanDatabase(url=pg_path_db.url),
                "job_dispatcher": JobDispatcherResource(notify_channel=payloads.channel),
            },
            instance=DagsterInstance.ephemeral(),
        )
    assert result.success
    created = sorted((j.id, j.job_type, j.target_id) for j in pg_path_db.jobs(status=PENDING))
    # two ghosts' replacements, the orphan's, the unrefined scrap's, the TIL's
    assert len(created) == 5
    assert sorted((p["job_id"], p["job_type"], p["target_id"]) for p in payloads) == created


def test_a_locked_table_is_reported_as_a_lock_timeout_not_waited_on(pg_db):
    ghost = pg_db.job(CARD_ANALYSIS, 1, PENDING, created_at=pg_db.ago(hours=1))
    migration = pg_db.engine.connect()
    transaction = migration.begin()
    # e.g. the app's ALTER TABLE
    migration.execute(text("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE"))
    try:
        started = time.monotonic()
        result, _ = run_recovery(pg_db, config={"lock_timeout_ms": 200})
        waited = time.monotonic() - started
    finally:
        transaction.rollback()
        migration.close()
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failure.step_key == step_key("check_san_database")  # the first op, reading the catalog
    error = failure.step_failure_data.error
    assert "lock timeout" in (error.message + (error.cause.message if error.cause else ""))
    assert waited < 60  # two retries (3 s, then 9 s: exponential) of a 0.2 s lock wait, not a hang
    assert pg_db.get_job(ghost).status == PENDING


def run_with_its_connection_killed_in_batch_2(db):
    """A recovery_job run (2 rows per batch) whose first area with two batches loses its
    connection in the second; the step's retry must finish. Returns (result, instance)."""
    KILLED.clear()
    instance = DagsterInstance.ephemeral()
    result = defs.resolve_job_def("recovery_job").execute_in_process(
        run_config=recovery_run_config({"batch_size": 2}),
        resources={
            "san_database": SanDatabase(url=db.url),
            "job_dispatcher": KillsItsOwnConnectionOnce(admin_url=db.url),
        },
        instance=instance,
        raise_on_error=False,
    )
    assert KILLED and result.success
    return result, instance


def test_a_killed_connection_fails_the_step_and_the_retry_finishes_the_work(pg_db):
    ghosts = [
        pg_db.job(CARD_ANALYSIS, target, PENDING, created_at=pg_db.ago(hours=1))
        for target in range(6)
    ]
    result, instance = run_with_its_connection_killed_in_batch_2(pg_db)
    retries = [e for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]
    assert [e.step_key for e in retries] == [step_key("recover_ghost_jobs")]
    causes, error = [], retries[0].event_specific_data.error
    while error is not None:  # the retry wraps the database error: walk its causes
        causes.append(f"{error.cls_name}: {error.message}")
        error = error.cause or error.context
    assert any(
        "AdminShutdown" in cause and "terminating connection" in cause for cause in causes
    ), causes
    for ghost, target in zip(ghosts, range(6), strict=True):
        assert pg_db.get_job(ghost).status == FAILED
        # closed once, one replacement
        assert [j.status for j in pg_db.jobs(target_id=target)] == [
            FAILED,
            PENDING,
        ]
    # The audit trail is exact across the retry: the 2 ghosts the failed attempt closed and
    # replaced are in the run's materialization, not missing nor counted as races.
    meta = latest_metadata(instance, "ghost_job_recovery")
    assert (meta["enqueued"], meta["skipped_by_race"], meta["earlier_attempts"]) == (6, 0, 1)
    assert sorted(r["failed_job_id"] for r in meta["recovered"]) == sorted(ghosts)
    assert sorted(r["new_job_id"] for r in meta["recovered"]) == sorted(
        j.id for t in range(6) for j in pg_db.jobs(target_id=t) if j.status == PENDING
    )
    [partial] = instance.fetch_observations(AssetKey("ghost_job_recovery"), limit=10).records
    [committed] = partial.asset_observation.metadata["areas"].value
    # what the failed attempt committed
    assert (committed["area"], committed["enqueued"]) == (
        "ghost_job_recovery",
        2,
    )


def test_a_killed_connection_in_a_target_recovery_keeps_its_audit_trail_exact(pg_db):
    user = pg_db.user()
    orphans = [
        pg_db.scrap(user, created_at=pg_db.ago(hours=1), refined=True, card=False) for _ in range(6)
    ]
    _result, instance = run_with_its_connection_killed_in_batch_2(pg_db)
    for scrap in orphans:
        assert len(pg_db.jobs(target_id=scrap)) == 1  # one job each, the retry doubled nothing
    meta = latest_metadata(instance, "orphan_scrap_recovery")
    assert (
        meta["detected"],
        meta["enqueued"],
        meta["skipped_by_race"],
        meta["earlier_attempts"],
    ) == (6, 6, 0, 1)
    assert sorted(r["scrap_id"] for r in meta["recovered"]) == sorted(orphans)
    assert sorted(r["new_job_id"] for r in meta["recovered"]) == sorted(
        j.id for s in orphans for j in pg_db.jobs(target_id=s)
    )


GHOST_TARGETS = range(1_000, 1_008)  # no scrap's id: the orphans keep no active job


def test_a_retry_after_dagster_s_storage_failed_lists_the_work_its_run_wrote(san_db, monkeypatch):
    """Dagster's storage fails the audit's read after an area's writes committed: the retry
    re-checks the same candidates, finds every one changed, and recognises them in SAN's rows
    (stamped with the run's write instant) as its own work, not as races."""
    ghosts = [
        san_db.job(CARD_ANALYSIS, target, PENDING, created_at=san_db.ago(hours=1))
        for target in GHOST_TARGETS
    ]
    user = san_db.user()
    orphans = [san_db.scrap(user, created_at=san_db.ago(hours=1), card=False) for _ in range(5)]
    instance = DagsterInstance.ephemeral()
    read_audits, failed_for = instance.fetch_materializations, []

    def storage_down_once_per_area(key, *args, **kwargs):
        if key not in failed_for:
            failed_for.append(key)
            raise OperationalError("SELECT … FROM event_logs", {}, ConnectionRefusedError(111))
        return read_audits(key, *args, **kwargs)

    monkeypatch.setattr(instance, "fetch_materializations", storage_down_once_per_area)
    result, _ = run_recovery(san_db, instance=instance, config={"batch_size": 3})
    assert result.success and AssetKey("ghost_job_recovery") in failed_for
    retried = [e.step_key for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]
    assert {step_key("recover_ghost_jobs"), step_key("recover_orphan_scraps")} <= set(retried)
    for target in GHOST_TARGETS:
        assert [j.status for j in san_db.jobs(target_id=target)] == [FAILED, PENDING]
    ghost_audit = latest_metadata(instance, "ghost_job_recovery")
    assert (ghost_audit["enqueued"], ghost_audit["skipped_by_race"]) == (8, 0)
    assert ghost_audit["earlier_attempts"] == 1
    assert sorted(r["failed_job_id"] for r in ghost_audit["recovered"]) == sorted(ghosts)
    assert sorted(r["new_job_id"] for r in ghost_audit["recovered"]) == sorted(
        j.id for t in GHOST_TARGETS for j in san_db.jobs(target_id=t, status=PENDING)
    )
    orphan_audit = latest_metadata(instance, "orphan_scrap_recovery")
    assert (orphan_audit["enqueued"], orphan_audit["skipped_by_race"]) == (5, 0)
    assert sorted(r["scrap_id"] for r in orphan_audit["recovered"]) == sorted(orphans)
    # how long they waited, from their saves and the ghosts' creation: an hour, not zero
    assert orphan_audit["heal_age_median_seconds"] >= 3600
    assert ghost_audit["heal_age_median_seconds"] >= 3600


def test_ages_are_measured_with_the_database_clock_not_the_hosts(san_db, monkeypatch):
    # The Dagster host runs 25 minutes fast: a 6-minute-old PENDING job must not look stale for
    # 31, a scrap saved a second ago must not pass the grace, and nothing is stamped in the future.
    import sys
    from datetime import timedelta

    from batch_pipeline.san import database

    fast = lambda: database.datetime.now(database.timezone.utc) + timedelta(minutes=25)  # noqa: E731
    for name, module in list(sys.modules.items()):
        if (
            name.startswith("batch_pipeline.")
            and not name.startswith("san_sandbox")
            and hasattr(module, "utc_now")
        ):
            monkeypatch.setattr(module, "utc_now", fast)
    user = san_db.user()
    young = san_db.job(
        CARD_ANALYSIS,
        san_db.scrap(user, created_at=san_db.ago(hours=2), card=False),
        PENDING,
        created_at=san_db.ago(minutes=6),
    )
    fresh_scrap = san_db.scrap(user, created_at=san_db.ago(seconds=1), card=False)
    result, instance = run_recovery(san_db)
    assert result.success
    assert san_db.get_job(young).status == PENDING
    assert latest_metadata(instance, "ghost_job_recovery")["detected"] == 0
    assert san_db.jobs(target_id=fresh_scrap) == []


def test_a_deterministic_database_error_fails_at_once_naming_the_cause(pg_db):
    # A read-only session (a replica, a SELECT-only role): retrying cannot help, so no retry.
    pg_db.job(CARD_ANALYSIS, 1, PENDING, created_at=pg_db.ago(hours=1))
    read_only = pg_db.url.replace(
        "options=-csearch_path%3D",
        "options=-cdefault_transaction_read_only%3Don%20-csearch_path%3D",
    )
    assert read_only != pg_db.url
    started = time.monotonic()
    result, _ = run_recovery(pg_db, url=read_only)
    assert not result.success and time.monotonic() - started < 20  # no 3 s + 9 s of retries
    assert [e for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"] == []
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failure.step_key == step_key("recover_ghost_jobs")
    message = failure.step_failure_data.error.message
    assert "ReadOnlySqlTransaction (SQLSTATE 25006)" in message and "Not retried" in message


def test_rows_with_timestamps_pandas_cannot_hold_are_still_judged_and_healed(pg_db):
    """A worker's zero time (year 1), '-infinity', 1500-01-01: SQL judges them (all very old),
    and the frames hold them clamped, so one such row cannot stop the healer."""
    from sqlalchemy import text

    user = pg_db.user()
    scraps = [pg_db.scrap(user, card=True) for _ in range(3)]
    orphan = pg_db.scrap(user)
    with pg_db.engine.begin() as conn:
        conn.execute(
            text("UPDATE scraps SET created_at = '1500-01-01' WHERE id = :id"), {"id": orphan}
        )
    zero_time = pg_db.job(
        CARD_ANALYSIS,
        scraps[0],
        PROCESSING,
        created_at=pg_db.ago(hours=3),
        started_at=pg_db.ago(hours=2),
    )
    minus_infinity = pg_db.job(SCRAP_REFINE, scraps[1], PENDING)
    long_ago = pg_db.job(CARD_ANALYSIS, scraps[2], PENDING)
    with pg_db.engine.begin() as conn:
        conn.execute(
            text("UPDATE jobs SET started_at = '0001-01-01 00:00:00+00' WHERE id = :id"),
            {"id": zero_time},
        )
        conn.execute(
            text("UPDATE jobs SET created_at = '-infinity' WHERE id = :id"), {"id": minus_infinity}
        )
        conn.execute(
            text("UPDATE jobs SET created_at = '1500-01-01' WHERE id = :id"), {"id": long_ago}
        )
    result, instance = run_recovery(pg_db)
    assert result.success
    ghosts = latest_metadata(instance, "ghost_job_recovery")
    assert sorted(pair["failed_job_id"] for pair in ghosts["recovered"]) == sorted(
        [zero_time, minus_infinity, long_ago]
    )
    assert [
        pair["scrap_id"] for pair in latest_metadata(instance, "orphan_scrap_recovery")["recovered"]
    ] == [orphan]


def test_a_role_whose_sessions_read_dates_the_sql_dmy_way_heals_as_any_other(pg_db):
    """DateStyle 'SQL, DMY' (and odd IntervalStyle, extra_float_digits) as the role's defaults:
    every transaction reads in ISO, so detection and the writes go on."""
    ghost = pg_db.job(CARD_ANALYSIS, 1, PENDING, created_at=pg_db.ago(hours=1))
    result, instance = run_recovery(
        pg_db, url=with_session_defaults(pg_db.url, ODD_SESSION_DEFAULTS)
    )
    assert result.success
    assert pg_db.get_job(ghost).status == FAILED
    assert latest_metadata(instance, "ghost_job_recovery")["enqueued"] == 1


def test_the_per_run_cap_defers_the_newest_and_the_next_runs_reach_every_target(san_db):
    """No target is starved by the cap: each run takes the oldest, so a deferred target only
    moves up, and ceil(n / cap) runs reach all of them."""
    user = san_db.user()
    orphans = [san_db.scrap(user, created_at=san_db.ago(hours=10 - n)) for n in range(5)]
    healed = []
    for _run in range(3):
        result, instance = run_recovery(san_db, config={"max_enqueue_per_run": 2})
        assert result.success
        audit = latest_metadata(instance, "orphan_scrap_recovery")
        healed.append([pair["scrap_id"] for pair in audit["recovered"]])
    assert healed == [orphans[:2], orphans[2:4], orphans[4:]]


def test_the_audit_says_how_the_throttle_paced_the_writes(san_db):
    for target in range(7):
        san_db.job(CARD_ANALYSIS, target, PENDING, created_at=san_db.ago(hours=1))
    result, instance = run_recovery(san_db, config={"batch_size": 3})
    assert result.success
    throttle = latest_metadata(instance, "ghost_job_recovery")["throttle"]
    assert (throttle["batches"], throttle["rows"]) == (3, 7)
    assert throttle["write_seconds"] > 0 and throttle["rest_seconds"] >= 0
    # PostgreSQL measures the load; SQLite has none to measure and keeps the batch-time rule
    zone = "unmeasured" if san_db.kind == "sqlite" else None
    assert sum(throttle["batches_by_zone"].values()) == 3
    assert zone is None or throttle["batches_by_zone"] == {zone: 3}


def test_the_audit_says_how_the_detection_s_sweep_was_paced(san_db, monkeypatch):
    """The orphan detection's full sweep, in chunks of 2 ids, is in its area's audit beside the
    writes' pacing; the ghost detection's, its attempts counted 2 targets a chunk, in its own."""
    small_chunks(monkeypatch, 2)
    user = san_db.user()
    orphans = [san_db.scrap(user, created_at=san_db.ago(hours=1)) for _ in range(5)]
    for target in range(3):
        san_db.job(CARD_ANALYSIS, 900 + target, PENDING, created_at=san_db.ago(hours=1))
    result, instance = run_recovery(san_db)
    assert result.success
    audit = latest_metadata(instance, "orphan_scrap_recovery")
    assert sorted(pair["scrap_id"] for pair in audit["recovered"]) == sorted(orphans)
    sweep = audit["detection_throttle"]
    assert sweep["batches"] == 3  # 5 consecutive ids, 2 a chunk
    assert sweep["write_seconds"] > 0 and sweep["rest_seconds"] >= 0
    ghosts = latest_metadata(instance, "ghost_job_recovery")
    assert len(ghosts["recovered"]) == 3
    assert ghosts["detection_throttle"]["batches"] == 2  # 3 targets, 2 a chunk
