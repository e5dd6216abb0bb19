"""Unrefined scraps: refined_content IS NULL + no active SCRAP_REFINE job
-> enqueue(SCRAP_REFINE)."""

from sqlalchemy import update

from batch_pipeline.recovery.target_writes import recover_targets
from batch_pipeline.recovery.targets import detect_targets
from batch_pipeline.recovery.unrefined_scraps import UNREFINED_SCRAPS
from batch_pipeline.san.dispatch import Dispatcher
from batch_pipeline.san.tables import SCRAP_REFINE, scraps


def test_only_scraps_without_refined_content_are_unrefined(san_db):
    user = san_db.user()
    san_db.scrap(user, refined=True, card=False)
    unrefined = san_db.scrap(user, refined=False, card=True)
    with san_db.engine.connect() as conn:
        assert detect_targets(conn, UNREFINED_SCRAPS, now=san_db.now)["scrap_id"].tolist() == [
            unrefined
        ]


def test_a_scrap_refined_between_detection_and_write_is_not_re_enqueued(san_db):
    user = san_db.user()
    late = san_db.scrap(user, refined=False)
    still = san_db.scrap(user, refined=False)
    with san_db.engine.connect() as conn:
        found = detect_targets(conn, UNREFINED_SCRAPS, now=san_db.now)
    with san_db.engine.begin() as conn:  # a worker, in between
        conn.execute(update(scraps).where(scraps.c.id == late).values(refined_content="done"))
    report = recover_targets(
        san_db.engine,
        Dispatcher(),
        UNREFINED_SCRAPS,
        found,
        now=san_db.now,
        thresholds={},
    )
    assert report.skipped_by_race == 1
    assert [(j.job_type, j.target_id) for j in san_db.jobs()] == [(SCRAP_REFINE, still)]
