"""The audit of a run that ended after writing, without recording it: the next run reads it back
from SAN's rows (the write instant every row of the area carries) and records it, once. A real
SIGKILL under the daemon: batch_pipeline_tests/operations/test_production_instance.py."""

import pytest
from dagster import (
    AssetKey,
    DagsterInstance,
    DagsterRunStatus,
    ReexecutionOptions,
    execute_job,
    instance_for_test,
    reconstructable,
)

from batch_pipeline.recovery.assets import recovery_run_config
from batch_pipeline.recovery.dead_runs import AUDIT_OF_RUN, audited_tag, wrote_tag
from batch_pipeline.san.tables import CARD_ANALYSIS, FAILED, PENDING
from batch_pipeline.support.heal_totals import read_heal_totals, update_heal_totals
from batch_pipeline_tests.recovery.reexecution import (
    DIES_IN_BATCH,
    DiesInBatch,
    recovery_job_dying_in_a_batch,
)
from batch_pipeline_tests.runs import latest_metadata, run_recovery

GHOST_TARGETS = range(2_000, 2_010)
GHOSTS = "ghost_job_recovery"


def audits(instance, area):
    records = instance.fetch_materializations(AssetKey(area), limit=20).records
    return [
        (record.run_id, {k: v.value for k, v in record.asset_materialization.metadata.items()})
        for record in records
    ]


def test_the_next_run_records_what_a_dead_run_wrote_once(san_db):
    ghosts = [
        san_db.job(CARD_ANALYSIS, target, PENDING, created_at=san_db.ago(hours=1))
        for target in GHOST_TARGETS
    ]
    instance = DagsterInstance.ephemeral()
    dead, _ = run_recovery(
        san_db, instance=instance, config={"batch_size": 2}, dispatcher=DiesInBatch(batch=3)
    )
    assert dead.dagster_run.status == DagsterRunStatus.FAILURE
    closed_by_dead = [ghost for ghost in ghosts if san_db.get_job(ghost).status == FAILED]
    assert len(closed_by_dead) == 4  # two batches of two committed, the third rolled back
    assert audits(instance, "ghost_job_recovery") == []  # in no materialization
    assert wrote_tag("ghost_job_recovery") in instance.get_run_by_id(dead.run_id).tags

    later, _ = run_recovery(san_db, instance=instance)
    assert later.success
    [(_, own), (recorded_by, recorded)] = audits(instance, "ghost_job_recovery")
    assert recorded_by == later.run_id and recorded[AUDIT_OF_RUN] == dead.run_id
    assert sorted(r["failed_job_id"] for r in recorded["recovered"]) == closed_by_dead
    replacements = {
        job.retry_of_job_id: job.id
        for target in GHOST_TARGETS
        for job in san_db.jobs(target_id=target, status=PENDING)
    }
    assert {r["failed_job_id"]: r["new_job_id"] for r in recorded["recovered"]} == {
        ghost: replacements[ghost] for ghost in closed_by_dead
    }
    assert (recorded["enqueued"], recorded["exhausted"]) == (4, 0)
    assert {r["stale_status"] for r in recorded["recovered"]} == {PENDING}
    # the later run's own audit: the rest, none of the dead run's work among its races
    assert (own["enqueued"], own["skipped_by_race"]) == (6, 0)
    assert latest_metadata(instance, "ghost_job_recovery") == own
    tags = instance.get_run_by_id(dead.run_id).tags
    assert tags[audited_tag("ghost_job_recovery")] == later.run_id

    again, _ = run_recovery(san_db, instance=instance)
    assert again.success
    recorded_for_dead = [
        meta for _, meta in audits(instance, "ghost_job_recovery") if AUDIT_OF_RUN in meta
    ]
    assert len(recorded_for_dead) == 1  # once


def test_a_dead_run_of_a_target_area_is_read_back_from_its_new_jobs(san_db):
    user = san_db.user()
    orphans = [san_db.scrap(user, created_at=san_db.ago(hours=1), card=False) for _ in range(7)]
    instance = DagsterInstance.ephemeral()
    dead, _ = run_recovery(
        san_db, instance=instance, config={"batch_size": 3}, dispatcher=DiesInBatch(batch=2)
    )
    assert dead.dagster_run.status == DagsterRunStatus.FAILURE
    enqueued_by_dead = {
        job.target_id: job.id for scrap in orphans for job in san_db.jobs(target_id=scrap)
    }
    assert len(enqueued_by_dead) == 3
    # an app job of the same type and a later instant is not the dead run's
    san_db.job(CARD_ANALYSIS, 99_999, PENDING)

    later, _ = run_recovery(san_db, instance=instance)
    assert later.success
    [recorded] = [
        meta for _, meta in audits(instance, "orphan_scrap_recovery") if AUDIT_OF_RUN in meta
    ]
    assert recorded[AUDIT_OF_RUN] == dead.run_id
    assert {r["scrap_id"]: r["new_job_id"] for r in recorded["recovered"]} == enqueued_by_dead
    own = latest_metadata(instance, "orphan_scrap_recovery")
    assert (own["enqueued"], own["skipped_by_race"]) == (4, 0)


def test_a_dry_run_records_no_dead_run(san_db):
    san_db.job(CARD_ANALYSIS, 2_000, PENDING, created_at=san_db.ago(hours=1))
    san_db.job(CARD_ANALYSIS, 2_001, PENDING, created_at=san_db.ago(hours=1))
    instance = DagsterInstance.ephemeral()
    dead, _ = run_recovery(
        san_db, instance=instance, config={"batch_size": 1}, dispatcher=DiesInBatch(batch=2)
    )
    assert dead.dagster_run.status == DagsterRunStatus.FAILURE
    dry, _ = run_recovery(san_db, instance=instance, config={"dry_run": True})
    assert dry.success and audits(instance, "ghost_job_recovery") == []
    assert audited_tag("ghost_job_recovery") not in instance.get_run_by_id(dead.run_id).tags


@pytest.fixture
def failed_parent(san_db, tmp_path, monkeypatch):
    """10 ghosts, and a recovery run (a real, re-executable one) that closed 4 of them and died
    in its third write batch: (the ghosts, the instance, the parent's result, `re_execute`:
    runs Dagster's re-execution from failure of the parent, dying in batch N if given one)."""
    ghosts = [
        san_db.job(CARD_ANALYSIS, target, PENDING, created_at=san_db.ago(hours=1))
        for target in GHOST_TARGETS
    ]
    monkeypatch.setenv("SAN_DATABASE_URL", san_db.url)
    job = reconstructable(recovery_job_dying_in_a_batch)
    with instance_for_test(temp_dir=str(tmp_path)) as instance:
        monkeypatch.setenv(DIES_IN_BATCH, "3")
        config = recovery_run_config({"batch_size": 2})
        with execute_job(job, instance, run_config=config) as parent:
            assert not parent.success
        monkeypatch.delenv(DIES_IN_BATCH)
        assert len([ghost for ghost in ghosts if san_db.get_job(ghost).status == FAILED]) == 4

        def re_execute(dies_in_batch: int = 0):
            if dies_in_batch:
                monkeypatch.setenv(DIES_IN_BATCH, str(dies_in_batch))
            from_failure = ReexecutionOptions.from_failure(parent.run_id, instance)
            with execute_job(job, instance, reexecution_options=from_failure) as child:
                monkeypatch.delenv(DIES_IN_BATCH, raising=False)
                return child

        yield ghosts, instance, parent, re_execute


def test_a_re_execution_from_failure_lists_each_closed_ghost_in_one_audit(san_db, failed_parent):
    """Dagster's "Re-execute from failure" runs a new run with the parent's detection (and so
    its write instant): the parent's committed batches are listed by the child's audit, not
    again by an audit of the parent as a dead run; a later run records nothing more."""
    ghosts, instance, parent, re_execute = failed_parent
    child = re_execute()
    assert child.success
    later, _ = run_recovery(san_db, instance=instance)
    assert later.success

    listed = [r["failed_job_id"] for _, meta in audits(instance, GHOSTS) for r in meta["recovered"]]
    assert sorted(listed) == sorted(ghosts)  # each closed ghost in exactly one audit
    assert not [meta for _, meta in audits(instance, GHOSTS) if AUDIT_OF_RUN in meta]
    assert instance.get_run_by_id(parent.run_id).tags[audited_tag(GHOSTS)] == child.run_id
    [by_child] = [meta for run, meta in audits(instance, GHOSTS) if run == child.run_id]
    assert by_child["includes_writes_of_runs"] == [parent.run_id]
    update_heal_totals(instance)
    assert read_heal_totals(instance).healed[GHOSTS] == len(ghosts)


def test_a_re_execution_of_a_run_already_audited_as_dead_writes_at_its_own_instant(
    san_db, failed_parent
):
    """When a later run has already recorded the parent as dead, the re-execution's audit does
    not list the parent's writes again: it writes at an instant of its own."""
    ghosts, instance, parent, re_execute = failed_parent
    later, _ = run_recovery(san_db, instance=instance)
    assert later.success
    child = re_execute()
    assert child.success
    entries = audits(instance, GHOSTS)
    listed = [r["failed_job_id"] for _, meta in entries for r in meta["recovered"]]
    assert sorted(listed) == sorted(ghosts)
    [by_child] = [meta for run, meta in entries if run == child.run_id]
    assert (by_child["enqueued"], by_child["skipped_by_race"]) == (0, len(ghosts))
    parent_instant = instance.get_run_by_id(parent.run_id).tags[wrote_tag(GHOSTS)]
    assert instance.get_run_by_id(child.run_id).tags[wrote_tag(GHOSTS)] != parent_instant


def test_a_re_execution_that_dies_too_is_recorded_with_its_parent_in_one_entry(
    san_db, failed_parent
):
    ghosts, instance, parent, re_execute = failed_parent
    child = re_execute(dies_in_batch=4)  # its batches 1-2 find the parent's work done
    assert not child.success
    closed = [ghost for ghost in ghosts if san_db.get_job(ghost).status == FAILED]
    assert len(closed) == 6  # the parent's two batches, then one of the child's
    later, _ = run_recovery(san_db, instance=instance)
    assert later.success
    entries = audits(instance, GHOSTS)
    [recorded] = [meta for _, meta in entries if AUDIT_OF_RUN in meta]
    assert recorded[AUDIT_OF_RUN] == parent.run_id
    assert recorded["audit_of_runs"] == [parent.run_id, child.run_id]
    assert sorted(r["failed_job_id"] for r in recorded["recovered"]) == closed
    listed = [r["failed_job_id"] for _, meta in entries for r in meta["recovered"]]
    assert sorted(listed) == sorted(ghosts)
