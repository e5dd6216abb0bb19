"""What every "target needs work + no active job" recovery shares, tested for each one in the
registry (orphan scraps, unrefined scraps, unwritten TILs)."""

import threading
from datetime import timedelta

import pytest

from batch_pipeline.recovery.orphan_scraps import ORPHAN_SCRAPS
from batch_pipeline.recovery.plan import MAX_ATTEMPTS, MAX_ENQUEUE_PER_RUN, RecoveryPolicy
from batch_pipeline.recovery.registry import RECOVERIES
from batch_pipeline.recovery.targets import (
    ORPHAN_MIN_AGE,
    TargetRecovery,
    detect_targets,
    recover_targets,
)
from batch_pipeline.recovery.unrefined_scraps import UNREFINED_SCRAPS
from batch_pipeline.recovery.unwritten_tils import UNWRITTEN_TILS
from batch_pipeline.san.dispatch import Dispatcher
from batch_pipeline.san.tables import COMPLETED, FAILED, PENDING, PROCESSING

TARGET_RECOVERIES = [recovery for recovery in RECOVERIES if isinstance(recovery, TargetRecovery)]
RULES = pytest.mark.parametrize("rule", TARGET_RECOVERIES, ids=[r.name for r in TARGET_RECOVERIES])
SCRAP_RULES = pytest.mark.parametrize(
    "rule", [ORPHAN_SCRAPS, UNREFINED_SCRAPS], ids=["orphan", "unrefined"]
)


def test_every_target_recovery_of_the_registry_is_tested_here():
    assert TARGET_RECOVERIES == [ORPHAN_SCRAPS, UNREFINED_SCRAPS, UNWRITTEN_TILS]


def needy_scrap(db, rule, user, **kwargs):
    """A target that needs `rule.job_type`: a scrap with no card (orphan), a scrap not refined
    (unrefined), a summary with no content (unwritten TIL)."""
    if rule is ORPHAN_SCRAPS:
        return db.scrap(user, card=False, refined=True, **kwargs)
    if rule is UNREFINED_SCRAPS:
        return db.scrap(user, card=True, refined=False, **kwargs)
    return db.summary(user, **kwargs)


def healthy_target(db, rule, user, **kwargs):
    if rule is UNWRITTEN_TILS:
        return db.summary(user, content="TIL", **kwargs)
    return db.scrap(user, card=True, refined=True, **kwargs)


def detect(db, rule, min_age=ORPHAN_MIN_AGE):
    with db.engine.connect() as conn:
        return detect_targets(conn, rule, now=db.now, min_age=min_age)


def recover(
    db,
    rule,
    candidates,
    max_attempts=MAX_ATTEMPTS,
    max_enqueue_per_run=MAX_ENQUEUE_PER_RUN,
    batch_size=1000,
    dry_run=False,
):
    return recover_targets(
        db.engine,
        Dispatcher(),
        rule,
        candidates,
        now=db.now,
        thresholds={},
        policy=RecoveryPolicy(
            max_attempts=max_attempts,
            max_enqueue_per_run=max_enqueue_per_run,
            batch_size=batch_size,
            dry_run=dry_run,
        ),
    )


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


@RULES
def test_recovery_enqueues_one_pending_job_per_scrap(san_db, rule):
    user = san_db.user()
    ids = [needy_scrap(san_db, rule, user, created_at=san_db.ago(hours=h)) for h in (3, 2, 1)]
    report = recover(san_db, rule, detect(san_db, rule))
    assert report.detected == report.enqueued == 3
    assert [pair[rule.id_key] for pair in report.recovered] == ids  # oldest first
    for pair in report.recovered:
        job = san_db.get_job(pair["new_job_id"])
        assert (job.job_type, job.target_id, job.status, job.retry_of_job_id) == (
            rule.job_type,
            pair[rule.id_key],
            PENDING,
            None,
        )
    assert detect(san_db, rule).empty


@RULES
def test_poison_cap_reports_exhausted_and_enqueues_nothing(san_db, rule):
    user = san_db.user()
    poison = needy_scrap(san_db, rule, user)
    healthy = needy_scrap(san_db, rule, user)
    for _ in range(3):
        san_db.job(rule.job_type, poison, FAILED, created_at=san_db.ago(hours=5))
    report = recover(san_db, rule, detect(san_db, rule), max_attempts=3)
    assert report.exhausted == 1 and report.exhausted_ids == [poison]
    assert [pair[rule.id_key] for pair in report.recovered] == [healthy]
    assert len(san_db.jobs(target_id=poison)) == 3
    # 0 = unlimited
    assert recover(san_db, rule, detect(san_db, rule), max_attempts=0).enqueued == 1


@RULES
def test_per_run_cap_and_dry_run(san_db, rule):
    user = san_db.user()
    ids = [needy_scrap(san_db, rule, user, created_at=san_db.ago(hours=10 - h)) for h in range(5)]
    dry = recover(san_db, rule, detect(san_db, rule), max_enqueue_per_run=2, dry_run=True)
    assert (dry.detected, dry.enqueued, dry.deferred) == (5, 0, 3)
    assert san_db.jobs() == []

    report = recover(san_db, rule, detect(san_db, rule), max_enqueue_per_run=2, batch_size=1)
    assert report.enqueued == 2 and report.deferred_ids == ids[2:] and report.batches == 2
    assert sorted(j.target_id for j in san_db.jobs()) == ids[:2]
    assert recover(san_db, rule, detect(san_db, rule)).enqueued == 3


@RULES
def test_two_overlapping_runs_enqueue_each_scrap_once(san_db, rule):
    user = san_db.user()
    ids = [needy_scrap(san_db, rule, user) for _ in range(8)]
    frames = [detect(san_db, rule), detect(san_db, rule)]
    barrier = threading.Barrier(2)
    reports = []

    def run(frame):
        barrier.wait()
        reports.append(recover(san_db, rule, frame, batch_size=3))

    threads = [threading.Thread(target=run, args=(f,)) for f in frames]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(j.target_id for j in san_db.jobs()) == ids
    assert sum(r.enqueued for r in reports) == 8 and sum(r.skipped_by_race for r in reports) == 8


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


@RULES
def test_heal_ages_run_from_the_last_failure_else_from_the_save(san_db, rule):
    user = san_db.user()
    failed_before = needy_scrap(san_db, rule, user, created_at=san_db.ago(hours=5))
    san_db.job(
        rule.job_type,
        failed_before,
        FAILED,
        created_at=san_db.ago(hours=4),
        updated_at=san_db.ago(hours=3),
    )
    san_db.job(
        rule.job_type,
        failed_before,
        FAILED,
        created_at=san_db.ago(hours=2),
        updated_at=san_db.ago(hours=1),
    )
    needy_scrap(san_db, rule, user, created_at=san_db.ago(hours=2))  # never attempted
    report = recover(san_db, rule, detect(san_db, rule), batch_size=1)
    assert report.enqueued == 2
    assert [round(age) for age in report.heal_ages_seconds] == [3600, 7200]  # oldest save first


@RULES
def test_a_failed_heal_age_lookup_costs_only_the_figure_not_the_committed_writes(
    san_db, rule, monkeypatch, caplog
):
    """The lookup runs beside the write batches; if it fails, the jobs are enqueued and
    reported all the same, their heal ages from the saves (a failed step would be retried and
    count its own work as races)."""
    import batch_pipeline.recovery.targets as targets

    def broken(*_args, **_kwargs):
        raise ConnectionError("the lookup's connection dropped")

    monkeypatch.setattr(targets, "last_failures", broken)
    user = san_db.user()
    scrap = needy_scrap(san_db, rule, user, created_at=san_db.ago(hours=5))
    san_db.job(
        rule.job_type, scrap, FAILED, created_at=san_db.ago(hours=4), updated_at=san_db.ago(hours=1)
    )
    report = recover(san_db, rule, detect(san_db, rule))
    assert report.enqueued == 1 and len(san_db.jobs(target_id=scrap, status=PENDING)) == 1
    assert [round(age) for age in report.heal_ages_seconds] == [5 * 3600]
    assert "could not read the healed targets' last failures" in caplog.text
