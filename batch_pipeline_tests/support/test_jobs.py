"""The support jobs in Dagster, on a real instance: a run of explain_job shows the story as
Markdown metadata (what an operator without a shell sees), redrive_job audits what it did and
who asked, audit_index_sensor keeps the index, and the operator's failed runs raise no alert."""

from datetime import UTC, datetime

from dagster import (
    AssetKey,
    DagsterEventType,
    DagsterInstance,
    build_sensor_context,
)

from batch_pipeline.alerts.sensors import OPERATOR_RUN_TAG
from batch_pipeline.definitions import defs
from batch_pipeline.recovery.orphan_scraps import ORPHAN_SCRAPS
from batch_pipeline.recovery.plan import COMMITTED_BY_FAILED_ATTEMPT
from batch_pipeline.san.resources import JobDispatcherResource, SanDatabase
from batch_pipeline.san.tables import PENDING, jobs
from batch_pipeline.support.audit_index import read_watermarks, touches_for
from batch_pipeline.support.sensors import audit_index_sensor
from batch_pipeline.support.touches import REDRIVE_ASSET
from batch_pipeline_tests.conftest import DiesOnBatch
from batch_pipeline_tests.runs import (
    latest_metadata,
    resources,
    run_explain,
    run_failure_alert,
    run_recovery,
    run_redrive,
)
from batch_pipeline_tests.support.conftest import exhausted_scrap

LONG_AGO = datetime(2000, 1, 1, tzinfo=UTC)


def step_output_metadata(instance, run_id):
    """The metadata of the run's one step output, as the event log (and the UI) holds it."""
    [record] = instance.get_records_for_run(run_id, of_type=DagsterEventType.STEP_OUTPUT).records
    return record.event_log_entry.dagster_event.event_specific_data.metadata


def test_a_run_of_explain_job_shows_the_story_as_markdown_and_writes_nothing(san_db):
    poison, _ = exhausted_scrap(san_db)
    recovery, instance = run_recovery(san_db)
    before = san_db.jobs()
    result = run_explain(san_db, instance, "scrap", poison)
    assert result.success
    assert san_db.jobs() == before
    metadata = step_output_metadata(instance, result.run_id)
    story = metadata["story"].value  # MarkdownMetadataValue: rendered by the UI
    assert type(metadata["story"]).__name__ == "MarkdownMetadataValue"
    assert f"### scrap {poison}" in story and "exhausted: 10 of max_attempts 10" in story
    assert recovery.run_id[:8] in story
    assert metadata["runs_that_touched_it"].value == 1
    assert result.dagster_run.tags[OPERATOR_RUN_TAG] == "true"


def test_explaining_an_unknown_id_fails_the_run_naming_it_and_alerts_no_one(san_db, monkeypatch):
    posted = []
    monkeypatch.setattr("batch_pipeline.alerts.sensors.post_alert", posted.append)
    instance = DagsterInstance.ephemeral()
    result = run_explain(san_db, instance, "scrap", 424242)
    assert not result.success
    [failure] = result.get_step_failure_events()
    assert "no scrap 424242 in SAN's scraps table" in failure.step_failure_data.error.message
    run_failure_alert(result, instance)
    assert posted == []


def test_redrive_job_is_a_dry_run_unless_told_and_records_what_it_did_and_who_asked(san_db):
    poison, failed = exhausted_scrap(san_db)
    instance = DagsterInstance.ephemeral()
    dry = run_redrive(san_db, instance, {"area": ORPHAN_SCRAPS.area})
    assert dry.success and san_db.jobs(status=PENDING) == []
    assert instance.get_latest_materialization_event(AssetKey(REDRIVE_ASSET)) is None
    [observed] = dry.get_asset_observation_events()
    would = observed.event_specific_data.asset_observation.metadata["would_redrive"].value
    assert [pair["target_id"] for pair in would] == [poison]

    real = run_redrive(
        san_db,
        instance,
        {"area": ORPHAN_SCRAPS.area, "target_ids": [poison], "dry_run": False, "reason": "fix"},
        tags={"batch_pipeline/asked_by": "cli ops@bastion"},
    )
    assert real.success
    [new_job] = san_db.jobs(status=PENDING)
    audit = latest_metadata(instance, REDRIVE_ASSET)
    assert audit["redriven"][0]["target_id"] == poison
    assert audit["redriven"][0]["new_job_id"] == new_job.id
    assert audit["redriven"][0]["last_job_id"] == failed[-1]
    assert (audit["asked_by"], audit["reason"], audit["dry_run"]) == (
        "cli ops@bastion",
        "fix",
        False,
    )


def test_a_bad_filter_or_nothing_matching_fails_naming_it_and_writes_nothing(san_db):
    exhausted_scrap(san_db)
    instance = DagsterInstance.ephemeral()
    bad = run_redrive(san_db, instance, {"area": ORPHAN_SCRAPS.area, "failed_since": "yesterday"})
    assert not bad.success
    [failure] = bad.get_step_failure_events()
    assert "failed_since='yesterday' is not an ISO 8601 date" in str(
        failure.step_failure_data.error
    )
    nothing = run_redrive(
        san_db,
        instance,
        {"area": ORPHAN_SCRAPS.area, "error_message_contains": "segfault", "dry_run": False},
    )
    assert not nothing.success
    assert "nothing to redrive: no exhausted target of orphan_scrap_recovery" in (
        nothing.get_step_failure_events()[0].step_failure_data.error.message
    )
    assert san_db.jobs(status=PENDING) == []


class DiesOnTheSecondBatch(JobDispatcherResource):
    def for_database(self, engine):
        return DiesOnBatch(2)


def test_a_redrive_that_dies_after_a_batch_committed_records_that_batch(san_db):
    [exhausted_scrap(san_db) for _ in range(3)]
    instance = DagsterInstance.ephemeral()
    result = defs.resolve_job_def("redrive_job").execute_in_process(
        run_config={
            "ops": {
                "redrive": {
                    "config": {"area": ORPHAN_SCRAPS.area, "dry_run": False, "batch_size": 2}
                }
            }
        },
        resources={
            "san_database": SanDatabase(url=san_db.url),
            "job_dispatcher": DiesOnTheSecondBatch(),
        },
        instance=instance,
        raise_on_error=False,
    )
    assert not result.success
    committed = san_db.jobs(status=PENDING)
    assert len(committed) == 2  # the first batch; the second rolled back
    [observed] = instance.fetch_observations(AssetKey(REDRIVE_ASSET), limit=10).records
    metadata = observed.asset_observation.metadata
    assert COMMITTED_BY_FAILED_ATTEMPT in metadata
    assert sorted(p["new_job_id"] for p in metadata["redriven"].value) == sorted(
        job.id for job in committed
    )
    # and the story of each of them tells it
    read = touches_for(instance, [("scrap", committed[0].target_id)], horizon=LONG_AGO)
    assert [t.committed_by_failed_attempt for t in read.touches] == [True]


def test_audit_index_sensor_indexes_the_audit_and_says_how_far(san_db):
    exhausted_scrap(san_db)
    recovery, instance = run_recovery(san_db)
    with build_sensor_context(instance=instance) as context:
        first = audit_index_sensor(context)
    assert "up to date" in first.skip_message and "indexed 4 events" in first.skip_message
    assert read_watermarks(instance)  # stored in Dagster's own storage
    with build_sensor_context(instance=instance) as context:
        again = audit_index_sensor(context)
    assert again.skip_message.startswith("indexed 0 events")
    assert san_db.count(jobs) == 10  # SAN's tables untouched


def test_the_launchpads_open_with_valid_config_and_redrive_s_is_a_dry_run(san_db):
    """Not a red "Missing required config": every config field has a default, and
    redrive_job launched as the Launchpad opens writes nothing."""
    for name in ("explain_job", "redrive_job"):
        ops = defs.resolve_job_def(name).run_config_schema.config_type.fields["ops"]
        assert not ops.is_required, name
    exhausted_scrap(san_db)
    before = san_db.jobs()
    result = defs.resolve_job_def("redrive_job").execute_in_process(
        instance=DagsterInstance.ephemeral(), resources=resources(san_db)
    )
    assert result.success and san_db.jobs() == before
