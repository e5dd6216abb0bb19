"""What every "target needs work + no active job" recovery shares in its detection, tested for
each one in the registry (orphan scraps, unrefined scraps, unwritten TILs)."""

from datetime import timedelta

from batch_pipeline.recovery.orphan_scraps import ORPHAN_SCRAPS
from batch_pipeline.recovery.targets import ORPHAN_MIN_AGE, detect_targets
from batch_pipeline.recovery.unrefined_scraps import UNREFINED_SCRAPS
from batch_pipeline.recovery.unwritten_tils import UNWRITTEN_TILS
from batch_pipeline.san.tables import COMPLETED, FAILED, PENDING, PROCESSING
from batch_pipeline_tests.recovery.conftest import (
    RULES,
    SCRAP_RULES,
    TARGET_RECOVERIES,
    detect,
    healthy_target,
    needy_scrap,
    recover,
)


def test_every_target_recovery_of_the_registry_is_tested_here():
    assert TARGET_RECOVERIES == [ORPHAN_SCRAPS, UNREFINED_SCRAPS, UNWRITTEN_TILS]


@RULES
def test_grace_period_leaves_young_scraps_alone(san_db, rule):
    user = san_db.user()
    young = needy_scrap(
        san_db, rule, user, created_at=san_db.now - ORPHAN_MIN_AGE + timedelta(minutes=1)
    )
    old = needy_scrap(
        san_db, rule, user, created_at=san_db.now - ORPHAN_MIN_AGE - timedelta(minutes=1)
    )
    healthy_target(san_db, rule, user, created_at=san_db.ago(hours=1))
    assert detect(san_db, rule)[rule.id_key].tolist() == [old]
    assert young in detect(san_db, rule, min_age=ORPHAN_MIN_AGE / 2)[rule.id_key].tolist()


@RULES
def test_an_active_job_belongs_to_ghost_recovery(san_db, rule):
    user = san_db.user()
    pending = needy_scrap(san_db, rule, user)
    processing = needy_scrap(san_db, rule, user)
    only_history = needy_scrap(san_db, rule, user)
    san_db.job(rule.job_type, pending, PENDING, created_at=san_db.ago(hours=5))
    san_db.job(
        rule.job_type,
        processing,
        PROCESSING,
        created_at=san_db.ago(hours=5),
        started_at=san_db.ago(hours=5),
    )
    san_db.job(rule.job_type, only_history, FAILED, created_at=san_db.ago(hours=5))
    san_db.job(rule.job_type, only_history, COMPLETED, created_at=san_db.ago(hours=4))
    # an active job of another type does not count
    other_type = next(t for t in ("CARD_ANALYSIS", "SCRAP_REFINE") if t != rule.job_type)
    other = needy_scrap(san_db, rule, user)
    san_db.job(other_type, other, PENDING)

    found = detect(san_db, rule)
    assert sorted(found[rule.id_key].tolist()) == sorted([only_history, other])
    assert found.set_index(rule.id_key).loc[only_history, "attempts"] == 2


@SCRAP_RULES
def test_a_look_back_window_limits_detection_to_recent_scraps(san_db, rule):
    user = san_db.user()
    old = needy_scrap(san_db, rule, user, created_at=san_db.ago(hours=49))
    recent = needy_scrap(san_db, rule, user, created_at=san_db.ago(hours=47))
    # recent, nothing missing
    san_db.scrap(user, card=True, refined=True, created_at=san_db.ago(hours=1))
    with san_db.engine.connect() as conn:
        windowed = detect_targets(conn, rule, now=san_db.now, lookback=timedelta(hours=48))
        full = detect_targets(conn, rule, now=san_db.now)
    assert windowed[rule.id_key].tolist() == [recent]
    assert full[rule.id_key].tolist() == [old, recent]


@RULES
def test_a_job_in_a_status_the_pipeline_does_not_know_counts_as_active(san_db, rule):
    # 'processing' in lower case, or a new app state: it may be a live job, so the target gets
    # no second one (it is never touched either; unknown_job_statuses names it).
    user = san_db.user()
    lower, new_state, finished = (needy_scrap(san_db, rule, user) for _ in range(3))
    san_db.job(rule.job_type, lower, "processing", created_at=san_db.ago(hours=5))
    san_db.job(rule.job_type, new_state, "RETRY_SCHEDULED", created_at=san_db.ago(hours=5))
    san_db.job(rule.job_type, finished, FAILED, created_at=san_db.ago(hours=5))
    assert detect(san_db, rule)[rule.id_key].tolist() == [finished]
    report = recover(san_db, rule, detect(san_db, rule))
    assert [pair[rule.id_key] for pair in report.recovered] == [finished]
    assert [j.status for j in san_db.jobs(target_id=lower)] == ["processing"]
