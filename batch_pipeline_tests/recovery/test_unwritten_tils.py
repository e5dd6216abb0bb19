"""Unwritten TILs (batch_pipeline's extension): content IS NULL + no active TIL_GENERATION job
-> enqueue(TIL_GENERATION). What every target recovery shares (grace, poison cap, per-run cap,
dry run, overlapping runs) is tested for it in test_targets.py."""

from sqlalchemy import update

from batch_pipeline.recovery.target_writes import recover_targets
from batch_pipeline.recovery.targets import ORPHAN_MIN_AGE, detect_targets
from batch_pipeline.recovery.unwritten_tils import UNWRITTEN_TILS
from batch_pipeline.san.dispatch import Dispatcher
from batch_pipeline.san.tables import COMPLETED, FAILED, PENDING, TIL_GENERATION, daily_summaries
from batch_pipeline_tests.runs import latest_metadata, run_recovery


def detect(db):
    with db.engine.connect() as conn:
        return detect_targets(conn, UNWRITTEN_TILS, now=db.now)


def recover(db, found):
    return recover_targets(
        db.engine, Dispatcher(), UNWRITTEN_TILS, found, now=db.now, thresholds={}
    )


def test_a_failed_or_vanished_til_job_is_healed_and_a_written_til_is_not(san_db):
    user = san_db.user()
    failed = san_db.summary(user)
    san_db.job(TIL_GENERATION, failed, FAILED, created_at=san_db.ago(hours=20))
    vanished = san_db.summary(user)  # the app's job insert never happened, or the row was lost
    written = san_db.summary(user, content="Today I learned")
    san_db.job(TIL_GENERATION, written, COMPLETED, created_at=san_db.ago(hours=20))
    found = detect(san_db)
    assert found["summary_id"].tolist() == [failed, vanished]
    assert found.set_index("summary_id")["attempts"].to_dict() == {failed: 1, vanished: 0}
    report = recover(san_db, found)
    assert [pair["summary_id"] for pair in report.recovered] == [failed, vanished]
    assert [(j.job_type, j.target_id, j.status) for j in san_db.jobs(status=PENDING)] == [
        (TIL_GENERATION, failed, PENDING),
        (TIL_GENERATION, vanished, PENDING),
    ]
    assert detect(san_db).empty


def test_a_summary_younger_than_the_grace_is_left_to_the_app(san_db):
    user = san_db.user()
    san_db.summary(user, created_at=san_db.now - ORPHAN_MIN_AGE / 2)  # its job may be on its way
    assert detect(san_db).empty


def test_a_til_written_or_a_job_created_between_detection_and_write_is_skipped(san_db):
    user = san_db.user()
    written_late, enqueued_late, still = (
        san_db.summary(user),
        san_db.summary(user),
        san_db.summary(user),
    )
    found = detect(san_db)
    with san_db.engine.begin() as conn:  # a worker writes one TIL, the app enqueues another's job
        conn.execute(
            update(daily_summaries)
            .where(daily_summaries.c.id == written_late)
            .values(content="TIL")
        )
    app_job = san_db.job(TIL_GENERATION, enqueued_late, PENDING)
    report = recover(san_db, found)
    assert report.skipped_by_race == 2 and report.enqueued == 1
    assert [(j.target_id, j.id == app_job) for j in san_db.jobs(job_type=TIL_GENERATION)] == [
        (enqueued_late, True),
        (still, False),
    ]


def test_a_stuck_til_job_is_the_ghost_recoverys_and_is_replaced_once(san_db):
    user = san_db.user()
    stuck = san_db.summary(user, created_at=san_db.ago(hours=3))
    ghost = san_db.job(TIL_GENERATION, stuck, PENDING, created_at=san_db.ago(hours=3))
    result, instance = run_recovery(san_db)
    assert result.success
    [pair] = latest_metadata(instance, "ghost_job_recovery")["recovered"]
    assert pair["failed_job_id"] == ghost and pair["target_id"] == stuck
    til = latest_metadata(instance, "til_generation_recovery")
    assert (til["detected"], til["enqueued"]) == (0, 0)  # it has an active job again
    assert [j.status for j in san_db.jobs(target_id=stuck)] == [FAILED, PENDING]
