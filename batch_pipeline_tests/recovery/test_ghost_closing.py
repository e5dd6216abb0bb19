"""Closing ghosts, statement by statement: the close is a compare-and-set against the rule at
its own instant, and what a run closed is read back from SAN's rows alone."""

from batch_pipeline.recovery.ghost_closing import (
    close_stale_jobs_statement,
    recover_ghost_jobs,
    report_of_writes_at,
)
from batch_pipeline.recovery.ghost_jobs import detect_ghost_jobs
from batch_pipeline.recovery.ghost_rule import CLOSED_BY, GhostRule
from batch_pipeline.recovery.plan import RecoveryPolicy
from batch_pipeline.san.database import write_transaction
from batch_pipeline.san.dispatch import Dispatcher
from batch_pipeline.san.limits import WriteLimits
from batch_pipeline.san.tables import CARD_ANALYSIS, COMPLETED, FAILED, PENDING, PROCESSING, jobs


def test_the_close_changes_only_jobs_still_stale_and_says_why(san_db):
    stale = san_db.job(CARD_ANALYSIS, 1, PENDING, created_at=san_db.ago(minutes=45))
    finished = san_db.job(CARD_ANALYSIS, 2, PENDING, created_at=san_db.ago(minutes=45))
    with san_db.engine.begin() as conn:  # a worker finished it after detection
        conn.execute(jobs.update().where(jobs.c.id == finished).values(status=COMPLETED))
    rule = GhostRule(now=san_db.now)
    with write_transaction(san_db.engine) as conn:
        closed = conn.execute(close_stale_jobs_statement(conn, [stale, finished], rule)).all()
    assert [(row[0], row[1], row[2]) for row in closed] == [(stale, CARD_ANALYSIS, 1)]
    assert san_db.get_job(finished).status == COMPLETED
    job = san_db.get_job(stale)
    assert job.status == FAILED
    assert job.error_message.startswith(f"{CLOSED_BY}: stale in PENDING for 45 min")


def test_what_a_run_closed_is_read_back_from_the_rows_at_its_instant(san_db):
    pending = san_db.job(CARD_ANALYSIS, 1, PENDING, created_at=san_db.ago(hours=1))
    processing = san_db.job(
        CARD_ANALYSIS, 2, PROCESSING, created_at=san_db.ago(hours=3), started_at=san_db.ago(hours=2)
    )
    rule = GhostRule(now=san_db.now)
    with san_db.engine.connect() as conn:
        ghosts = detect_ghost_jobs(conn, rule)
    ran = recover_ghost_jobs(san_db.engine, Dispatcher(), ghosts, rule, RecoveryPolicy())
    read = report_of_writes_at(san_db.engine, rule.now, WriteLimits())
    assert (read.enqueued, read.exhausted) == (ran.enqueued, ran.exhausted) == (2, 0)
    assert sorted(read.recovered, key=lambda entry: entry["failed_job_id"]) == sorted(
        ran.recovered, key=lambda entry: entry["failed_job_id"]
    )
    statuses = {entry["failed_job_id"]: entry["stale_status"] for entry in read.recovered}
    assert statuses == {pending: PENDING, processing: PROCESSING}
