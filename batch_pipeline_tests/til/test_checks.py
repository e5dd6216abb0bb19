"""til_coverage for one day partition, and the sensors that run the checks after each run."""

from datetime import timedelta

from dagster import DagsterInstance, build_run_status_sensor_context
from sqlalchemy import insert

from batch_pipeline.definitions import defs
from batch_pipeline.san.resources import JobDispatcherResource, SanDatabase
from batch_pipeline.san.tables import daily_summaries
from batch_pipeline.til.checks import TIL_DAY_TAG
from batch_pipeline_tests.runs import at, run_til

DAY = "2026-11-28"


def coverage(db, instance):
    result = defs.resolve_job_def("til_checks_job").execute_in_process(
        tags={TIL_DAY_TAG: DAY},
        instance=instance,
        resources={
            "san_database": SanDatabase(url=db.url),
            "job_dispatcher": JobDispatcherResource(kind="none"),
        },
    )
    [evaluation] = [
        e.event_specific_data
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    ]
    return evaluation


def test_til_coverage_passes_after_the_run_and_warns_on_a_missing_user(san_db):
    covered, missed = san_db.user(), san_db.user()
    san_db.scrap(covered, created_at=at(DAY, 10), card=True)
    instance = DagsterInstance.ephemeral()
    assert run_til(san_db, DAY, instance=instance)[0].success
    assert coverage(san_db, instance).passed

    san_db.scrap(missed, created_at=at(DAY, 11), card=True)  # became active after the run
    evaluation = coverage(san_db, instance)
    assert not evaluation.passed and evaluation.severity.value == "WARN"
    assert evaluation.metadata["user_ids_without_summary"].value == [missed]


def test_til_coverage_warns_on_a_summary_waiting_over_two_hours(san_db):
    user = san_db.user()
    with san_db.engine.begin() as conn:
        conn.execute(
            insert(daily_summaries).values(
                user_id=user, target_date=at(DAY).date(), created_at=san_db.now - timedelta(hours=3)
            )
        )
    evaluation = coverage(san_db, DagsterInstance.ephemeral())
    assert not evaluation.passed and evaluation.metadata["summaries_waiting_over_2h"].value == 1


def test_check_runs_are_requested_after_each_successful_run(san_db):
    instance = DagsterInstance.ephemeral()
    result, _ = run_til(san_db, DAY, instance=instance)
    context = build_run_status_sensor_context(
        sensor_name="til_checks_after_run",
        dagster_event=result.get_run_success_event(),
        dagster_instance=instance,
        dagster_run=result.dagster_run,
    )
    request = defs.resolve_sensor_def("til_checks_after_run")(context)
    assert request.tags[TIL_DAY_TAG] == DAY and request.run_key == result.run_id
