"""The code location: what `dagster dev` loads, the schedule, the instance config."""

import shutil
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from dagster import DagsterInstance, DefaultScheduleStatus, Definitions, build_schedule_context

from batch_pipeline.definitions import build_definitions, defs
from batch_pipeline.recovery.ghost_jobs import STALE_PENDING_AFTER, STALE_PROCESSING_AFTER
from batch_pipeline.recovery.plan import minutes
from batch_pipeline.san.database import san_kinds
from batch_pipeline.san.timezone import TimezoneConfigError

ROOT = Path(__file__).resolve().parents[1]


def test_the_code_location_loads_as_dagster_dev_loads_it():
    """Every job, sensor and schedule the docs name, and nothing else: a definitions.py that
    drops one (or adds one the README does not tell of) fails here."""
    Definitions.validate_loadable(defs)
    repository = defs.get_repository_def()
    jobs = {job.name for job in repository.get_all_jobs()} - {"__ASSET_JOB"}
    assert jobs == {
        "recovery_job",
        "recovery_freshness_job",
        "fast_heal_job",
        "til_auto_generation_job",
        "til_checks_job",
        "explain_job",
        "redrive_job",
        "run_retention_job",
    }
    assert {sensor.name for sensor in repository.sensor_defs} == {
        "fast_heal_sensor",
        "fast_lane_watch",
        "audit_index_sensor",
        "til_checks_after_run",
        "run_failure_alert",
        "asset_check_alert",
        "run_worker_watchdog",
    }
    assert {schedule.name for schedule in repository.schedule_defs} == {
        "recovery_schedule",
        "recovery_freshness_schedule",
        "til_auto_generation_schedule",
        "run_retention_schedule",
    }


def test_definitions_expose_the_job_assets_and_resources():
    assert defs.resolve_job_def("recovery_job").tags["batch_pipeline/concurrency"] == "recovery_job"
    specs = {spec.key.to_user_string(): spec for spec in defs.resolve_all_asset_specs()}
    for area in (
        "ghost_job_recovery",
        "orphan_scrap_recovery",
        "orphan_scrap_refine_recovery",
        "til_generation_recovery",
    ):
        assert specs[area].group_name == "san_recovery" and specs[area].description
    # descriptions are built from the rule's own constants, not prose copies of them
    pending, processing = minutes(STALE_PENDING_AFTER), minutes(STALE_PROCESSING_AFTER)
    expected = f"PENDING > {pending} min / PROCESSING > {processing} min"
    assert expected in specs["ghost_job_recovery"].description
    assert "extension of the design" in specs["til_generation_recovery"].description


def test_each_asset_shows_its_database_and_each_schedule_shows_under_its_assets():
    """The catalog's kind icon, and the asset page's *Automation*: a schedule is listed under the
    assets its job materializes (an external asset's page said "No automations found")."""
    specs = list(defs.resolve_all_asset_specs())
    assert {spec.key.to_user_string() for spec in specs if spec.kinds != san_kinds()} == set()
    assert san_kinds() == {"sqlite"}  # the tests' embedded default; PostgreSQL's below
    repository = defs.get_repository_def()
    materialized_by_a_schedule = {
        key.to_user_string()
        for schedule in repository.schedule_defs
        for key in defs.resolve_job_def(schedule.job_name).asset_layer.selected_asset_keys
    }
    assert {"til_auto_generation", "ghost_job_recovery"} <= materialized_by_a_schedule


def test_on_postgresql_the_assets_show_postgres(monkeypatch):
    monkeypatch.setenv("SAN_DATABASE_URL", "postgresql+psycopg://batch@db.internal/san")
    assert san_kinds() == {"postgres"}
    til = build_definitions().resolve_assets_def("til_auto_generation")
    assert til.specs_by_key[til.key].kinds == {"postgres"}


def test_recovery_schedule_runs_every_two_hours_in_seoul_by_default(monkeypatch):
    monkeypatch.delenv("SAN_TIMEZONE", raising=False)
    schedule = build_definitions().resolve_schedule_def("recovery_schedule")
    assert schedule.cron_schedule == "0 0-22/2 * * *"
    assert schedule.execution_timezone == "Asia/Seoul"
    assert schedule.default_status == DefaultScheduleStatus.RUNNING
    assert schedule.job_name == "recovery_job"
    context = build_schedule_context(
        scheduled_execution_time=datetime(2026, 11, 30, 2, 0, tzinfo=ZoneInfo("Asia/Seoul"))
    )
    [request] = schedule.evaluate_tick(context).run_requests
    assert "ops" not in request.run_config  # scheduled runs use the design's defaults


def test_san_timezone_overrides_and_an_unknown_zone_is_named(monkeypatch):
    monkeypatch.setenv("SAN_TIMEZONE", "America/New_York")
    assert (
        build_definitions().resolve_schedule_def("recovery_schedule").execution_timezone
        == "America/New_York"
    )
    monkeypatch.setenv("SAN_TIMEZONE", "Mars/Olympus_Mons")
    with pytest.raises(
        TimezoneConfigError, match="SAN_TIMEZONE='Mars/Olympus_Mons' is not a known IANA time zone"
    ):
        build_definitions()


def test_dagster_yaml_queues_recovery_runs_one_at_a_time(tmp_path):
    shutil.copy(ROOT / "dagster.yaml", tmp_path / "dagster.yaml")
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        limits = instance.get_concurrency_config().run_queue_config.tag_concurrency_limits
    assert {"key": "batch_pipeline/concurrency", "value": "recovery_job", "limit": 1} in limits


def test_the_demo_console_says_info_and_the_event_log_keeps_every_event(tmp_path, pg_db, capfd):
    from dagster import DagsterEventType

    from batch_pipeline_tests.runs import run_recovery

    shutil.copy(ROOT / "dagster.yaml", tmp_path / "dagster.yaml")
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        result, _ = run_recovery(pg_db, instance=instance)
        assert result.success
        started = instance.get_records_for_run(
            result.run_id, of_type=DagsterEventType.STEP_START
        ).records
    console = capfd.readouterr().err
    assert started  # a DEBUG event, still in the event log
    assert " - INFO - " in console and " - DEBUG - " not in console, console[-2000:]


def test_the_product_never_imports_the_sandbox():
    # The code location, its CLI and the doctor run against production databases; the sandbox
    # (which rewrites timestamps and plays workers) must not even be loaded there.
    import subprocess
    import sys

    probe = (
        "import sys, batch_pipeline.definitions, batch_pipeline.__main__, batch_pipeline.doctor; "
        "print(sorted(m for m in sys.modules if m.startswith('san_sandbox')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "[]"


def test_an_embedded_default_that_was_never_made_names_the_command_that_makes_it(
    tmp_path, monkeypatch
):
    from dagster import Failure

    from batch_pipeline.san.resources import SanDatabase

    monkeypatch.setenv("SAN_DATA_DIR", str(tmp_path))
    with pytest.raises(Failure, match="make run"):
        SanDatabase().open_verified()


def test_an_invalid_recovery_cron_is_an_error_at_load_that_names_it(monkeypatch):
    monkeypatch.setenv("SAN_RECOVERY_CRON", "every tuesday")
    with pytest.raises(
        ValueError, match="SAN_RECOVERY_CRON='every tuesday' is not a valid cron expression"
    ):
        build_definitions()
    monkeypatch.setenv("SAN_RECOVERY_CRON", "*/15 * * * *")
    assert (
        build_definitions().resolve_schedule_def("recovery_schedule").cron_schedule
        == "*/15 * * * *"
    )


def test_the_code_location_uses_no_private_dagster_module():
    # Private modules (dagster._…) change without notice between releases.
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "batch_pipeline").rglob("*.py")
        if "from dagster._" in path.read_text() or "import dagster._" in path.read_text()
    ]
    assert offenders == []


def test_make_run_takes_a_port():
    import subprocess

    default = subprocess.run(
        ["make", "-n", "-C", str(ROOT), "run"], capture_output=True, text=True, check=True
    ).stdout
    other = subprocess.run(
        ["make", "-n", "-C", str(ROOT), "run", "PORT=3001"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "--port 3000" in default and "--port 3001" in other and "--port 3000" not in other


def launchpad_default_yaml(definitions, job_name: str) -> str:
    """What the Launchpad pre-fills: the webserver's rootDefaultYaml, computed the same way."""
    from dagster._core.snap import JobSnap
    from dagster._core.snap.snap_to_yaml import default_values_yaml_from_type_snap

    snap = JobSnap.from_job_def(definitions.resolve_job_def(job_name))
    schema = snap.config_schema_snapshot
    return default_values_yaml_from_type_snap(
        schema, schema.get_config_snap(snap.mode_def_snaps[0].root_config_key)
    )


def test_the_launchpad_pre_fills_no_redis_setting_where_there_is_no_redis(monkeypatch):
    for name in ("SAN_JOB_DISPATCHER", "SAN_REDIS_URL", "SAN_REDIS_STREAM", "SAN_NOTIFY_CHANNEL"):
        monkeypatch.delenv(name, raising=False)
    prefilled = launchpad_default_yaml(build_definitions(), "recovery_job")
    assert "redis" not in prefilled and "stale_pending_after_minutes: 30" in prefilled
    monkeypatch.setenv("SAN_JOB_DISPATCHER", "redis_stream")
    monkeypatch.setenv("SAN_REDIS_URL", "redis://:secret@cache:6379/0")
    prefilled = launchpad_default_yaml(build_definitions(), "recovery_job")
    # the variable's name, never its value
    assert "SAN_REDIS_URL" in prefilled and "secret" not in prefilled
