"""The recovery assets' checks, evaluated in the recovery_job run itself (no second run)."""

import time

import pytest
from dagster import DagsterInstance
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from batch_pipeline.recovery import checks, ghost_jobs
from batch_pipeline.recovery.registry import AREAS
from batch_pipeline.san.database import read_transaction, utc_now
from batch_pipeline.san.schema import create_recommended_indexes
from batch_pipeline.san.tables import CARD_ANALYSIS, FAILED, PENDING, PROCESSING
from batch_pipeline_tests.runs import run_recovery


def run_checks(db, instance, config=None):
    """One recovery_job run; its check evaluations by (asset, check)."""
    result, _ = run_recovery(db, instance=instance, config=config)
    assert result.success
    evaluations = {}
    for event in result.all_events:
        if event.event_type_value == "ASSET_CHECK_EVALUATION":
            data = event.event_specific_data
            evaluations[(data.asset_key.to_user_string(), data.check_name)] = data
    return evaluations


def test_all_checks_pass_on_a_healthy_database_with_indexes(san_db):
    create_recommended_indexes(san_db.engine)
    evaluations = run_checks(san_db, DagsterInstance.ephemeral())
    # three on ghost_job_recovery, and exhausted_targets + deferred_backlog on every recovery
    assert set(evaluations) == {
        ("ghost_job_recovery", name)
        for name in ("ghost_backlog", "recovery_indexes", "unknown_job_statuses")
    } | {(area, name) for area in AREAS for name in ("exhausted_targets", "deferred_backlog")}
    assert (
        len(evaluations) == 11 and ("til_generation_recovery", "exhausted_targets") in evaluations
    )
    assert all(e.passed for e in evaluations.values()), {
        k: e.description for k, e in evaluations.items() if not e.passed
    }


def test_ghost_backlog_fails_with_error_when_a_ghost_outlives_twice_its_threshold(san_db):
    # Evaluated after this run's healing: what is still stale then is what recovery could not
    # keep up with (here the per-run cap defers the younger ghosts).
    create_recommended_indexes(san_db.engine)
    healed = san_db.job(
        CARD_ANALYSIS,
        3,
        PROCESSING,
        created_at=san_db.ago(hours=5),
        started_at=san_db.ago(minutes=180),
    )
    san_db.job(CARD_ANALYSIS, 1, PENDING, created_at=san_db.ago(minutes=59))  # within twice 30 min
    old = san_db.job(
        CARD_ANALYSIS,
        2,
        PROCESSING,
        created_at=san_db.ago(hours=5),
        started_at=san_db.ago(minutes=121),
    )
    evaluation = run_checks(san_db, DagsterInstance.ephemeral(), config={"max_enqueue_per_run": 1})[
        ("ghost_job_recovery", "ghost_backlog")
    ]
    assert san_db.get_job(healed).status == FAILED
    assert not evaluation.passed and evaluation.severity.value == "ERROR"
    assert evaluation.metadata["job_ids"].value == [old]


def test_recovery_indexes_warns_with_the_exact_commands(pg_db):
    evaluation = run_checks(pg_db, DagsterInstance.ephemeral())[
        ("ghost_job_recovery", "recovery_indexes")
    ]
    assert not evaluation.passed and evaluation.severity.value == "WARN"
    assert (
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_san_jobs_target"
        in evaluation.metadata["create_with"].value
    )


def test_recovery_indexes_warns_about_a_superseded_index(pg_db):
    create_recommended_indexes(pg_db.engine)
    assert run_checks(pg_db, DagsterInstance.ephemeral())[
        ("ghost_job_recovery", "recovery_indexes")
    ].passed
    with pg_db.engine.begin() as conn:
        conn.execute(
            text(
                "CREATE INDEX ix_san_scraps_unrefined ON scraps (created_at) WHERE refined_content "
                "IS NULL"
            )
        )
    evaluation = run_checks(pg_db, DagsterInstance.ephemeral())[
        ("ghost_job_recovery", "recovery_indexes")
    ]
    assert not evaluation.passed and evaluation.severity.value == "WARN"
    assert evaluation.metadata["superseded"].value == ["ix_san_scraps_unrefined"]
    assert (
        evaluation.metadata["drop_with"].value
        == "DROP INDEX CONCURRENTLY IF EXISTS ix_san_scraps_unrefined"
    )


def test_exhausted_targets_warns_once_with_the_new_ids(san_db):
    create_recommended_indexes(san_db.engine)
    instance = DagsterInstance.ephemeral()
    user = san_db.user()
    poison = san_db.scrap(user, created_at=san_db.ago(hours=3))
    for _ in range(2):
        san_db.job(CARD_ANALYSIS, poison, FAILED, created_at=san_db.ago(hours=3))
    first = run_checks(san_db, instance, config={"max_attempts": 2})[
        ("orphan_scrap_recovery", "exhausted_targets")
    ]
    assert not first.passed and first.metadata["exhausted_ids"].value == [poison]
    # still exhausted, no longer new
    assert run_checks(san_db, instance, config={"max_attempts": 2})[
        ("orphan_scrap_recovery", "exhausted_targets")
    ].passed


def test_deferred_backlog_warns_after_more_than_three_runs_in_a_row(san_db):
    create_recommended_indexes(san_db.engine)
    instance = DagsterInstance.ephemeral()
    user = san_db.user()
    for _ in range(6):
        san_db.scrap(user, created_at=san_db.ago(hours=3), refined=True, card=True)
    for hours in range(6):
        san_db.job(CARD_ANALYSIS, 1000 + hours, PENDING, created_at=san_db.ago(hours=hours + 1))
    for run in range(4):
        evaluation = run_checks(san_db, instance, config={"max_enqueue_per_run": 1})[
            ("ghost_job_recovery", "deferred_backlog")
        ]
        assert evaluation.passed == (run < 3)
    assert evaluation.metadata["runs_in_a_row_with_deferred_work"].value == 4


def test_the_database_checks_on_a_locked_table_fail_with_a_lock_timeout_instead_of_hanging(pg_db):
    migration = pg_db.engine.connect()
    transaction = migration.begin()
    migration.execute(text("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE"))
    try:
        started = time.monotonic()
        with pytest.raises(OperationalError, match="lock timeout"):
            with read_transaction(pg_db.engine) as conn:  # what check_recovery_health does
                checks.database_checks(conn, ghost_jobs.GhostRule(now=utc_now()))
        waited = time.monotonic() - started
    finally:
        transaction.rollback()
        migration.close()
    assert waited < 60  # the default 5 s lock_timeout, not a hang


def test_jobs_with_an_unknown_status_are_left_alone_and_counted(san_db):
    """A status the pipeline does not know (a new app state, a lower-case typo) is never closed
    or counted as active; the unknown_job_statuses check reports how many and which."""
    old = san_db.ago(hours=5)
    odd = [
        san_db.job(CARD_ANALYSIS, 1, status, created_at=old, started_at=old)
        for status in ("CANCELLED", "pending", "CANCELLED")
    ]
    ghost = san_db.job(CARD_ANALYSIS, 2, PENDING, created_at=old)
    before = {job_id: san_db.get_job(job_id) for job_id in odd}
    check = run_checks(san_db, DagsterInstance.ephemeral())[
        ("ghost_job_recovery", "unknown_job_statuses")
    ]
    assert {job_id: san_db.get_job(job_id) for job_id in odd} == before  # untouched, row for row
    assert san_db.get_job(ghost).status == FAILED  # the known ghost beside them was healed
    assert not check.passed
    assert check.metadata["unknown_status_jobs"].value == 3
    assert check.metadata["by_status"].value == {
        "CANCELLED": {"jobs": 2, "first_job_id": odd[0]},
        "pending": {"jobs": 1, "first_job_id": odd[1]},
    }
    assert "'CANCELLED': 2" in check.description and "'pending': 1" in check.description
