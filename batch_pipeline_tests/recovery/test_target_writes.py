"""What every target recovery writes (target_writes.py): one PENDING job per target, oldest
first, within the caps, once under overlapping runs, with the heal ages from the audit."""

import threading

from sqlalchemy import event

from batch_pipeline.recovery import target_writes
from batch_pipeline.san.tables import FAILED, PENDING
from batch_pipeline_tests.recovery.conftest import (
    RULES,
    detect,
    needy_scrap,
    recover,
)


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
def test_heal_ages_are_read_a_few_targets_a_statement_and_none_is_lost(san_db, rule, monkeypatch):
    """FAILURE_LOOKUP_IDS targets a statement: one lookup of a default cap's 5,000 took 300 ms
    under saturation, past the 250 ms a statement of ours may take."""
    monkeypatch.setattr(target_writes, "FAILURE_LOOKUP_IDS", 2)
    user = san_db.user()
    ids = [needy_scrap(san_db, rule, user, created_at=san_db.ago(hours=9)) for _ in range(5)]
    for hours, target in enumerate(ids, start=1):
        san_db.job(
            rule.job_type,
            target,
            FAILED,
            created_at=san_db.ago(hours=8),
            updated_at=san_db.ago(hours=hours),
        )
    lookups = []

    def count(_conn, _cursor, statement, *_):
        if "max(jobs.updated_at)" in statement:
            lookups.append(statement)

    event.listen(san_db.engine, "before_cursor_execute", count)
    try:
        report = recover(san_db, rule, detect(san_db, rule))
    finally:
        event.remove(san_db.engine, "before_cursor_execute", count)
    assert report.enqueued == 5 and len(lookups) == 3  # 2 + 2 + 1 targets
    assert sorted(round(age) for age in report.heal_ages_seconds) == [h * 3600 for h in range(1, 6)]


@RULES
def test_a_failed_heal_age_lookup_costs_only_the_figure_not_the_committed_writes(
    san_db, rule, monkeypatch, caplog
):
    """The lookup runs beside the write batches; if it fails, the jobs are enqueued and
    reported all the same, their heal ages from the saves (a failed step would be retried and
    count its own work as races)."""

    def broken(*_args, **_kwargs):
        raise ConnectionError("the lookup's connection dropped")

    monkeypatch.setattr(target_writes, "last_failures", broken)
    user = san_db.user()
    scrap = needy_scrap(san_db, rule, user, created_at=san_db.ago(hours=5))
    san_db.job(
        rule.job_type, scrap, FAILED, created_at=san_db.ago(hours=4), updated_at=san_db.ago(hours=1)
    )
    report = recover(san_db, rule, detect(san_db, rule))
    assert report.enqueued == 1 and len(san_db.jobs(target_id=scrap, status=PENDING)) == 1
    assert [round(age) for age in report.heal_ages_seconds] == [5 * 3600]
    assert "could not read the healed targets' last failures" in caplog.text
