"""Orphan scraps: no knowledge card + no active CARD_ANALYSIS job -> enqueue(CARD_ANALYSIS)."""

from datetime import timedelta

import pytest
from sqlalchemy import text

from batch_pipeline.recovery.orphan_scraps import ORPHAN_SCRAPS
from batch_pipeline.recovery.target_writes import recover_targets
from batch_pipeline.recovery.targets import detect_targets
from batch_pipeline.san.dialects.postgresql import has_target_index
from batch_pipeline.san.dispatch import Dispatcher
from batch_pipeline.san.tables import CARD_ANALYSIS
from batch_pipeline_tests.conftest import PG_WRITE_PATHS, san_database_on_path


def test_only_scraps_without_a_card_are_orphans(san_db):
    user = san_db.user()
    with_card = san_db.scrap(user, card=True)
    orphan = san_db.scrap(user, card=False)
    unrefined_orphan = san_db.scrap(user, card=False, refined=False)
    with san_db.engine.connect() as conn:
        found = detect_targets(conn, ORPHAN_SCRAPS, now=san_db.now)
    assert sorted(found["scrap_id"].tolist()) == sorted([orphan, unrefined_orphan])
    assert with_card not in found["scrap_id"].tolist()


def test_a_card_made_between_detection_and_write_is_not_re_enqueued(san_db):
    user = san_db.user()
    late = san_db.scrap(user)
    still = san_db.scrap(user)
    with san_db.engine.connect() as conn:
        found = detect_targets(conn, ORPHAN_SCRAPS, now=san_db.now)
    san_db.card(late, user)  # a worker, in between
    report = recover_targets(
        san_db.engine,
        Dispatcher(),
        ORPHAN_SCRAPS,
        found,
        now=san_db.now,
        thresholds={},
    )
    assert report.skipped_by_race == 1
    assert [(j.job_type, j.target_id) for j in san_db.jobs()] == [(CARD_ANALYSIS, still)]


@pytest.fixture(params=PG_WRITE_PATHS)
def pg_path_db(request, tmp_path):
    with san_database_on_path(request.param, tmp_path) as database:
        yield database


def test_the_full_sweep_prefers_the_key_indexes_only_with_the_target_index(pg_path_db):
    # The full sweep merges scraps_pkey with the cards' scrap_id key instead of hashing every
    # card (a hash that spills at SAN's size); the job probes then need ix_san_jobs_target.
    orphan = pg_path_db.scrap(pg_path_db.user(), card=False)
    with pg_path_db.engine.connect() as conn:
        indexed = has_target_index(conn)
    with pg_path_db.engine.begin() as conn:
        assert detect_targets(conn, ORPHAN_SCRAPS, now=pg_path_db.now)["scrap_id"].tolist() == [
            orphan
        ]
        assert conn.execute(text("SHOW enable_seqscan")).scalar() == ("off" if indexed else "on")
    with pg_path_db.engine.begin() as conn:  # transaction-local, and not for a look-back window
        assert conn.execute(text("SHOW enable_seqscan")).scalar() == "on"
        found = detect_targets(
            conn, ORPHAN_SCRAPS, now=pg_path_db.now, lookback=timedelta(hours=48)
        )
        assert found["scrap_id"].tolist() == [orphan]
        assert conn.execute(text("SHOW enable_seqscan")).scalar() == "on"
