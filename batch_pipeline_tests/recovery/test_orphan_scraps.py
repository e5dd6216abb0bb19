"""Orphan scraps: no knowledge card + no active CARD_ANALYSIS job -> enqueue(CARD_ANALYSIS)."""

from batch_pipeline.recovery.orphan_scraps import ORPHAN_SCRAPS
from batch_pipeline.recovery.scrap_recovery import detect_scraps, recover_scraps
from batch_pipeline.san.dispatch import Dispatcher
from batch_pipeline.san.schema import CARD_ANALYSIS


def test_only_scraps_without_a_card_are_orphans(san_db):
    user = san_db.user()
    with_card = san_db.scrap(user, card=True)
    orphan = san_db.scrap(user, card=False)
    unrefined_orphan = san_db.scrap(user, card=False, refined=False)
    with san_db.engine.connect() as conn:
        found = detect_scraps(conn, ORPHAN_SCRAPS, now=san_db.now)
    assert sorted(found["scrap_id"].tolist()) == sorted([orphan, unrefined_orphan])
    assert with_card not in found["scrap_id"].tolist()


def test_a_card_made_between_detection_and_write_is_not_re_enqueued(san_db):
    user = san_db.user()
    late = san_db.scrap(user)
    still = san_db.scrap(user)
    with san_db.engine.connect() as conn:
        found = detect_scraps(conn, ORPHAN_SCRAPS, now=san_db.now)
    san_db.card(late, user)  # a worker, in between
    report = recover_scraps(
        san_db.engine, Dispatcher(), ORPHAN_SCRAPS, found, now=san_db.now, thresholds={},
    )
    assert report.skipped_by_race == 1
    assert [(j.job_type, j.target_id) for j in san_db.jobs()] == [(CARD_ANALYSIS, still)]
