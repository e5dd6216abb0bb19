"""til_auto_generation_job through Dagster: partitions, schedule, time zones, retries, audit."""

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from dagster import AssetKey, DagsterInstance, Failure, build_schedule_context
from dagster._core.errors import DagsterInvalidConfigError
from dagster._core.storage.tags import PARENT_RUN_ID_TAG, ROOT_RUN_ID_TAG

from batch_pipeline.definitions import build_definitions, defs
from batch_pipeline.san.dispatch import Dispatcher
from batch_pipeline.san.resources import JobDispatcherResource, SanDatabase
from batch_pipeline.san.schema import create_recommended_indexes
from batch_pipeline.san.tables import TIL_GENERATION
from batch_pipeline.til.assets import til_run_config
from batch_pipeline.til.ops import CREATED_TAG
from batch_pipeline.til.partitions import PARTITION_SET_TAG, PARTITION_TAG
from batch_pipeline_tests.conftest import job_notifications
from batch_pipeline_tests.runs import at, run_til, shown_first
from batch_pipeline_tests.sweeps import small_chunks

SEOUL = ZoneInfo("Asia/Seoul")
NEW_YORK = ZoneInfo("America/New_York")


def til_metadata(instance, partition):
    records = instance.fetch_materializations(AssetKey("til_auto_generation"), limit=100).records
    [record] = [r for r in records if r.partition_key == partition]
    return {k: v.value for k, v in record.asset_materialization.metadata.items()}


def test_a_partition_run_creates_the_day_tils_and_records_them(san_db):
    active, waiting = san_db.user(), san_db.user()
    san_db.scrap(active, created_at=at("2026-11-28", 9), card=True)
    san_db.scrap(active, created_at=at("2026-11-28", 21), card=True)
    san_db.scrap(waiting, created_at=at("2026-11-28", 10), card=False)
    result, instance = run_til(san_db, "2026-11-28")
    assert result.success

    [summary] = san_db.summaries()
    [job] = san_db.jobs()
    meta = til_metadata(instance, "2026-11-28")
    assert (
        meta["active_users"],
        meta["summaries_created"],
        meta["jobs_created"],
        meta["users_waiting_for_cards"],
    ) == (1, 1, 1, 1)
    assert meta["summary_ids"] == [summary.id] and meta["job_ids"] == [job.id]
    assert (job.job_type, job.target_id) == (TIL_GENERATION, summary.id)
    assert (
        meta["day_start_utc"] == "2026-11-27T15:00:00+00:00"
        and meta["day_end_utc"] == "2026-11-28T15:00:00+00:00"
    )


def test_a_run_launched_with_its_partition_alone_is_counted_under_the_job_s_partitions(san_db):
    """The GraphQL API, the CLI and `dagster job launch` may tag a run with `dagster/partition`
    alone; the job's Partitions tab counts only runs that also carry the partition set."""
    user = san_db.user()
    san_db.scrap(user, created_at=at("2026-11-28", 9), card=True)
    instance = DagsterInstance.ephemeral()
    result = defs.resolve_job_def("til_auto_generation_job").execute_in_process(
        tags={PARTITION_TAG: "2026-11-28"},  # as the API callers launch it: no partition set
        resources={
            "san_database": SanDatabase(url=san_db.url),
            "job_dispatcher": JobDispatcherResource(kind="none"),
        },
        instance=instance,
    )
    assert result.success
    tags = instance.get_run_by_id(result.run_id).tags
    assert tags[PARTITION_TAG] == "2026-11-28"
    assert tags[PARTITION_SET_TAG] == "til_auto_generation_job_partition_set"
    # and the run list tells what it did
    assert tags[CREATED_TAG] == "1 TIL for 2026-11-28"
    assert shown_first(tags) == CREATED_TAG


def test_pg_notify_announces_every_til_job_once(pg_db):
    # The TIL statement announces its jobs itself; the batch must not announce them again.
    users = [pg_db.user() for _ in range(3)]
    for user in users:
        pg_db.scrap(user, created_at=at("2026-11-28"), card=True)
    with job_notifications(pg_db) as payloads:
        result, _ = run_til(
            pg_db,
            "2026-11-28",
            dispatcher=JobDispatcherResource(kind="pg_notify", notify_channel=payloads.channel),
            config={"batch_size": 2},
        )
    assert result.success
    jobs = sorted((job.id, TIL_GENERATION, job.target_id) for job in pg_db.jobs())
    assert len(jobs) == 3
    assert sorted((p["job_id"], p["job_type"], p["target_id"]) for p in payloads) == jobs


def test_the_schedule_fires_at_3_in_seoul_for_the_previous_day(monkeypatch):
    monkeypatch.delenv("SAN_TIMEZONE", raising=False)
    schedule = build_definitions().resolve_schedule_def("til_auto_generation_schedule")
    assert (schedule.cron_schedule, schedule.execution_timezone) == ("0 3 * * *", "Asia/Seoul")
    context = build_schedule_context(
        scheduled_execution_time=datetime(2026, 11, 30, 3, 0, tzinfo=SEOUL)
    )
    [request] = schedule.evaluate_tick(context).run_requests
    assert request.partition_key == "2026-11-29"


def test_a_daylight_saving_zone_cuts_the_day_at_local_midnight(monkeypatch, san_db):
    monkeypatch.setenv("SAN_TIMEZONE", "America/New_York")
    monkeypatch.setenv("SAN_TIL_FIRST_DAY", "2026-01-01")  # the spring-forward day is a partition
    definitions = build_definitions()
    schedule = definitions.resolve_schedule_def("til_auto_generation_schedule")
    # 03:00 on the day after New York's spring-forward day runs that (23-hour) day
    [request] = schedule.evaluate_tick(
        build_schedule_context(scheduled_execution_time=datetime(2026, 3, 9, 3, 0, tzinfo=NEW_YORK))
    ).run_requests
    assert request.partition_key == "2026-03-08"

    inside = [san_db.user() for _ in range(2)]
    outside = [san_db.user() for _ in range(2)]
    san_db.scrap(inside[0], created_at=at("2026-03-08", 0, 0, 0, zone=NEW_YORK), card=True)
    san_db.scrap(inside[1], created_at=at("2026-03-08", 23, 59, 59, zone=NEW_YORK), card=True)
    san_db.scrap(
        outside[0], created_at=at("2026-03-08", 0, zone=NEW_YORK) - timedelta(seconds=1), card=True
    )
    san_db.scrap(outside[1], created_at=at("2026-03-09", 0, zone=NEW_YORK), card=True)
    result, instance = run_til(san_db, "2026-03-08", definitions=definitions)
    assert result.success
    assert sorted(s.user_id for s in san_db.summaries()) == inside
    meta = til_metadata(instance, "2026-03-08")
    assert (meta["day_start_utc"], meta["day_end_utc"]) == (
        "2026-03-08T05:00:00+00:00",
        "2026-03-09T04:00:00+00:00",
    )


def test_a_three_day_backfill_creates_each_day_tils(san_db):
    days = ["2026-11-25", "2026-11-26", "2026-11-27"]
    users = {day: [san_db.user() for _ in range(i + 1)] for i, day in enumerate(days)}
    for day, day_users in users.items():
        for user in day_users:
            san_db.scrap(user, created_at=at(day, 15), card=True)
    instance = DagsterInstance.ephemeral()
    for day in days:  # what a backfill of the three partitions launches
        assert run_til(san_db, day, instance=instance)[0].success
    summaries = san_db.summaries()
    for day in days:
        assert (
            sorted(s.user_id for s in summaries if s.target_date == date.fromisoformat(day))
            == users[day]
        )
        assert til_metadata(instance, day)["summaries_created"] == len(users[day])


FAILED_ONCE: set[str] = set()


class DiesOnceOnSecondBatch(Dispatcher):
    def __init__(self, key):
        self.key, self.calls = key, 0

    def announce_in_transaction(self, conn, new_jobs):
        self.calls += 1
        if self.calls == 2 and self.key not in FAILED_ONCE:
            FAILED_ONCE.add(self.key)
            raise ConnectionError("connection to the SAN database was lost")


class FlakyDispatcherResource(JobDispatcherResource):
    key: str

    def for_database(self, engine):
        return DiesOnceOnSecondBatch(self.key)


def test_a_retried_op_does_not_duplicate_anyone(san_db, request):
    users = [san_db.user() for _ in range(5)]
    for user in users:
        san_db.scrap(user, created_at=at("2026-11-28"), card=True)
    result, instance = run_til(
        san_db,
        "2026-11-28",
        dispatcher=FlakyDispatcherResource(key=request.node.name),
        config={"batch_size": 2},
    )
    assert result.success
    retries = [e for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]
    assert len(retries) == 1
    assert sorted(s.user_id for s in san_db.summaries()) == users
    assert len(san_db.jobs()) == 5
    meta = til_metadata(instance, "2026-11-28")
    # the audit covers both attempts: the 2 summaries the failed one committed, the retry's 3
    assert (meta["already_done_in_run"], meta["summaries_created"], meta["jobs_created"]) == (
        2,
        5,
        5,
    )
    assert sorted(meta["summary_ids"]) == sorted(s.id for s in san_db.summaries())
    assert sorted(meta["job_ids"]) == sorted(j.id for j in san_db.jobs())


class DiesOnSecondBatchForGood(Dispatcher):
    def __init__(self):
        self.calls = 0

    def announce_in_transaction(self, conn, new_jobs):
        self.calls += 1
        if self.calls == 2:
            raise Failure("the dispatcher is gone", allow_retries=False)


class DeadDispatcherResource(JobDispatcherResource):
    def for_database(self, engine):
        return DiesOnSecondBatchForGood()


def test_a_run_re_executed_after_a_failure_does_not_duplicate_anyone(san_db):
    users = [san_db.user() for _ in range(5)]
    for user in users:
        san_db.scrap(user, created_at=at("2026-11-28"), card=True)
    instance = DagsterInstance.ephemeral()
    failed, _ = run_til(
        san_db,
        "2026-11-28",
        instance=instance,
        dispatcher=DeadDispatcherResource(),
        config={"batch_size": 2},
    )
    assert not failed.success
    assert len(san_db.summaries()) == 2  # the first batch committed

    # What Dagster's "re-execute from failure" gives the new run: the root run's id as a tag.
    result = defs.resolve_job_def("til_auto_generation_job").execute_in_process(
        partition_key="2026-11-28",
        run_config=til_run_config({"batch_size": 2}),
        resources={
            "san_database": SanDatabase(url=san_db.url),
            "job_dispatcher": JobDispatcherResource(kind="none"),
        },
        instance=instance,
        tags={ROOT_RUN_ID_TAG: failed.run_id, PARENT_RUN_ID_TAG: failed.run_id},
    )
    assert result.success
    assert sorted(s.user_id for s in san_db.summaries()) == users
    assert len(san_db.jobs()) == 5
    meta = til_metadata(instance, "2026-11-28")
    # the audit covers both attempts: the 2 summaries the failed one committed, the retry's 3
    assert (meta["already_done_in_run"], meta["summaries_created"], meta["jobs_created"]) == (
        2,
        5,
        5,
    )
    assert sorted(meta["summary_ids"]) == sorted(s.id for s in san_db.summaries())
    assert sorted(meta["job_ids"]) == sorted(j.id for j in san_db.jobs())


def til_observations(instance, partition):
    return [
        r.event_log_entry.asset_observation
        for r in instance.fetch_observations(AssetKey("til_auto_generation"), limit=100).records
        if r.partition_key == partition
    ]


def test_dry_run_reports_without_writing_and_adds_no_point_to_the_plots(san_db):
    user = san_db.user()
    san_db.scrap(user, created_at=at("2026-11-28"), card=True)
    result, instance = run_til(san_db, "2026-11-28", config={"dry_run": True})
    assert result.success and san_db.summaries() == []
    assert instance.fetch_materializations(AssetKey("til_auto_generation"), limit=10).records == []
    [observation] = til_observations(instance, "2026-11-28")
    assert (
        observation.metadata["active_users"].value == 1
        and observation.metadata["dry_run"].value is True
    )


def test_a_backfill_of_a_day_that_has_tils_says_before_and_when_it_runs_who_gets_a_second(san_db):
    again, new = san_db.user(), san_db.user()
    san_db.scrap(again, created_at=at("2026-11-28"), card=True)
    assert run_til(san_db, "2026-11-28")[0].success  # the day's scheduled run: one TIL for `again`
    san_db.scrap(new, created_at=at("2026-11-28", 20), card=True)

    result, instance = run_til(san_db, "2026-11-28", config={"dry_run": True})  # the preview
    [preview] = til_observations(instance, "2026-11-28")
    assert (
        preview.metadata["active_users"].value,
        preview.metadata["users_with_an_earlier_til"].value,
    ) == (2, 1)
    assert len(san_db.summaries()) == 1

    result, instance = run_til(san_db, "2026-11-28", tags={"dagster/backfill": "abcdefgh"})
    meta = til_metadata(instance, "2026-11-28")
    assert (meta["summaries_created"], meta["users_with_an_earlier_til"]) == (2, 1)
    assert sorted(s.user_id for s in san_db.summaries()) == sorted([again, again, new])
    # the daily scheduled run does not pay for the look-up (a scan of every summary)
    result, instance = run_til(san_db, "2026-11-29")
    assert "users_with_an_earlier_til" not in til_metadata(instance, "2026-11-29")


def test_a_partition_key_that_is_not_a_date_is_refused(san_db):
    with pytest.raises(Exception, match="not-a-day"):
        run_til(san_db, "not-a-day")
    assert san_db.summaries() == []


@pytest.mark.parametrize(
    "field,value",
    [
        ("batch_size", 0),
        ("batch_size", 50_001),
        ("lock_timeout_ms", 0),
        ("statement_timeout_ms", -1),
    ],
)
def test_a_config_value_out_of_range_fails_the_first_op_naming_the_field(san_db, field, value):
    san_db.scrap(san_db.user(), created_at=at("2026-11-28"), card=True)
    result, _ = run_til(san_db, "2026-11-28", config={field: value})
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failure.step_key == "run_til_auto_generation.check_san_database" and field in str(
        failure.step_failure_data.error
    )
    assert san_db.summaries() == [] and san_db.jobs() == []


@pytest.mark.parametrize(
    "field,value",
    [
        ("batch_size", "many"),
        ("lock_timeout_ms", "soon"),
        ("statement_timeout_ms", 1.5),
        ("dry_run", "maybe"),
    ],
)
def test_a_config_value_of_the_wrong_type_is_refused_before_the_run_starts(san_db, field, value):
    san_db.scrap(san_db.user(), created_at=at("2026-11-28"), card=True)
    with pytest.raises(DagsterInvalidConfigError, match=field):
        run_til(san_db, "2026-11-28", config={field: value})
    assert san_db.summaries() == [] and san_db.jobs() == []


def test_summaries_are_stamped_with_the_true_instant_on_a_dagster_instance_in_seoul_time(
    pg_db, tmp_path
):
    """Dagster's run storage keeps naive timestamps of its database's zone: on an instance whose
    PostgreSQL runs in Asia/Seoul, the run record's create_timestamp read as UTC is 9 h ahead."""
    import uuid

    from sqlalchemy import text
    from sqlalchemy.engine import make_url

    from batch_pipeline.san.database import create_san_engine
    from batch_pipeline_tests.conftest import pg_admin_url

    admin = create_san_engine(pg_admin_url()).execution_options(isolation_level="AUTOCOMMIT")
    storage_db = f"bp_dagster_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {storage_db}"))
        conn.execute(text(f"ALTER DATABASE {storage_db} SET TimeZone = 'Asia/Seoul'"))
    server = make_url(pg_admin_url())
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(
        "storage:\n  postgres:\n    postgres_url: "
        f"postgresql://{server.username or 'postgres'}@{server.host or '127.0.0.1'}:"
        f"{server.port or 5432}/{storage_db}\n"
    )
    try:
        user = pg_db.user()
        pg_db.scrap(user, created_at=at("2026-11-28", 9), card=True)
        with DagsterInstance.from_config(str(home)) as instance:
            result, _ = run_til(pg_db, "2026-11-28", instance=instance)
            assert result.success
            run_started = til_metadata(instance, "2026-11-28")["summaries_created_at"]
        [summary] = pg_db.summaries()
        skew = abs((summary.created_at - datetime.now(UTC)).total_seconds())
        assert skew < 120, (summary.created_at, run_started)  # not 9 h in the future
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {storage_db} WITH (FORCE)"))
        admin.dispose()


def test_summaries_carry_the_databases_clock_on_a_host_two_hours_ahead(san_db, monkeypatch):
    """The Dagster host's clock is 2 h ahead (every time.time() of the run and its events): the
    summaries are still stamped with the database's now, so their age, which the fast lane and
    recovery_job judge with the database's clock, is right; a retry still finds them."""
    import time as time_module

    from sqlalchemy import text

    real_time = time_module.time
    monkeypatch.setattr(time_module, "time", lambda: real_time() + 7200)
    user = san_db.user()
    san_db.scrap(user, created_at=at("2026-11-28", 9), card=True)
    with san_db.engine.connect() as conn:
        before = conn.execute(text("SELECT CURRENT_TIMESTAMP")).scalar_one()
    result, instance = run_til(san_db, "2026-11-28")
    assert result.success
    [summary] = san_db.summaries()
    created = summary.created_at.replace(tzinfo=summary.created_at.tzinfo or UTC)
    before = (
        datetime.fromisoformat(str(before)).replace(tzinfo=UTC)
        if isinstance(before, str)
        else before
    )
    assert abs((created - before.astimezone(UTC)).total_seconds()) < 60  # not 2 h ahead
    run = instance.get_run_by_id(result.run_id)
    assert datetime.fromisoformat(run.tags["batch_pipeline/summaries_created_at"]) == created


def test_the_audit_says_how_the_day_s_sweep_was_paced(san_db, monkeypatch):
    """The day's scraps read in chunks of 2 (on the created_at index): the audit says so."""
    small_chunks(monkeypatch, 2)
    create_recommended_indexes(san_db.engine)
    user = san_db.user()
    for hour in range(5):
        san_db.scrap(user, created_at=at("2026-11-28", 9 + hour), card=True)
    result, instance = run_til(san_db, "2026-11-28")
    assert result.success
    meta = til_metadata(instance, "2026-11-28")
    assert meta["summaries_created"] == 1
    assert meta["detection_throttle"]["batches"] == 3  # 2, 2, then the short one ends it
    assert meta["throttle"]["rows"] == 1
