"""The audit of a run that ended after writing, without recording it: the next run reads it back
from SAN's rows (the write instant every row of the area carries) and records it, once. A real
SIGKILL under the daemon: batch_pipeline_tests/operations/test_production_instance.py."""

from dagster import AssetKey, DagsterInstance, DagsterRunStatus

from batch_pipeline.recovery.dead_runs import AUDIT_OF_RUN, audited_tag, wrote_tag
from batch_pipeline.san.resources import JobDispatcherResource
from batch_pipeline.san.tables import CARD_ANALYSIS, FAILED, PENDING
from batch_pipeline_tests.conftest import DiesOnBatch
from batch_pipeline_tests.runs import latest_metadata, run_recovery

GHOST_TARGETS = range(2_000, 2_010)


class DiesInBatch(JobDispatcherResource):
    """The run's process dies inside its `batch`-th write batch of the first area, after two
    batches committed: the error is no database fault, so the step is not retried."""

    batch: int

    def for_database(self, engine):
        return DiesOnBatch(self.batch)


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
