"""Announcing new jobs: pg_notify in the transaction, Redis stream after commit, or rows only."""

import socket
import uuid

import pytest
import redis
from sqlalchemy import event

from batch_pipeline.san.database import write_transaction
from batch_pipeline.san.dialects.postgresql import has_target_index
from batch_pipeline.san.dispatch import (
    DispatcherConfigError,
    NewJob,
    PgNotifyDispatcher,
    RedisStreamDispatcher,
    build_dispatcher,
)
from batch_pipeline.san.enqueue import BatchWritten, enqueue_jobs, run_in_batches
from batch_pipeline.san.job_source import EnqueueRequest
from batch_pipeline.san.resources import JobDispatcherResource
from batch_pipeline.san.tables import CARD_ANALYSIS
from batch_pipeline_tests.conftest import PG_WRITE_PATHS, job_notifications, san_database_on_path

REDIS_URL = "redis://127.0.0.1:6379/0"


def has_target_index_path(db) -> bool:
    with db.engine.connect() as conn:
        return has_target_index(conn)


def enqueue_batch(db, dispatcher):
    def write(conn, batch):
        outcome = enqueue_jobs(
            conn,
            CARD_ANALYSIS,
            [EnqueueRequest(t) for t in batch],
            now=db.now,
            max_attempts=10,
            notify_channel=dispatcher.statement_channel,
        )
        return BatchWritten(outcome, outcome.created, outcome.announced)

    return write


@pytest.fixture(params=PG_WRITE_PATHS)
def pg_path_db(request, tmp_path):
    with san_database_on_path(request.param, tmp_path) as database:
        yield database


def test_pg_notify_payloads_arrive_once_per_job_when_the_jobs_commit(pg_path_db):
    statements = []
    event.listen(
        pg_path_db.engine,
        "before_cursor_execute",
        lambda conn, cursor, sql, *_: statements.append(sql),
    )
    with job_notifications(pg_path_db) as payloads:
        dispatcher = PgNotifyDispatcher(payloads.channel)
        results, report = run_in_batches(
            pg_path_db.engine, dispatcher, [11, 12, 13], 2, enqueue_batch(pg_path_db, dispatcher)
        )
    created = [job for outcome in results for job in outcome.created]
    assert report.batches == 2
    # With the target index the enqueue statement announces the jobs itself, and the batch
    # sends no second one (PostgreSQL would fold the duplicates, so only the statements show it).
    in_statement = has_target_index_path(pg_path_db)
    assert [outcome.announced for outcome in results] == [in_statement] * 2
    notifying = [sql for sql in statements if "pg_notify" in sql]
    assert len(notifying) == 2
    assert all(("INSERT INTO jobs" in sql) is in_statement for sql in notifying)
    assert sorted(payloads, key=lambda p: p["job_id"]) == [
        {"job_id": job.job_id, "job_type": CARD_ANALYSIS, "target_id": job.target_id}
        for job in created
    ]
    assert sorted(p["target_id"] for p in payloads) == [11, 12, 13]


def test_pg_notify_is_not_sent_when_the_batch_rolls_back(pg_path_db):
    with job_notifications(pg_path_db) as payloads:
        dispatcher = PgNotifyDispatcher(payloads.channel)
        with pytest.raises(RuntimeError):
            with write_transaction(pg_path_db.engine) as tx:
                # the statement's own notify, if any
                enqueue_batch(pg_path_db, dispatcher)(tx, [41, 42])
                dispatcher.announce_in_transaction(tx, [NewJob(1, CARD_ANALYSIS, 1)])
                raise RuntimeError("process died before commit")
    assert payloads == []
    assert pg_path_db.jobs() == []


def test_redis_stream_gets_one_entry_per_job_after_commit(san_db):
    stream = f"san:jobs:test:{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(REDIS_URL)
    try:
        results, report = run_in_batches(
            san_db.engine,
            RedisStreamDispatcher(REDIS_URL, stream=stream),
            [21, 22],
            10,
            enqueue_batch(san_db, RedisStreamDispatcher(REDIS_URL, stream=stream)),
        )
        entries = client.xrange(stream)
    finally:
        client.delete(stream)
    created = results[0].created
    assert report.announce_failures == 0
    assert [{k.decode(): v.decode() for k, v in fields.items()} for _, fields in entries] == [
        {"job_id": str(job.job_id), "job_type": CARD_ANALYSIS, "target_id": str(job.target_id)}
        for job in created
    ]


def test_redis_down_keeps_the_jobs_and_counts_the_failures(san_db, caplog):
    dead = RedisStreamDispatcher("redis://127.0.0.1:1/0", timeout_s=0.5)
    results, report = run_in_batches(san_db.engine, dead, [31, 32], 10, enqueue_batch(san_db, dead))
    assert report.announce_failures == 2
    assert sorted(j.target_id for j in san_db.jobs()) == [31, 32]
    assert "could not announce 2 job(s)" in caplog.text


def test_a_hung_redis_costs_a_run_its_wait_budget_not_a_timeout_per_batch(san_db, caplog):
    """A Redis that accepts connections and never answers (SIGSTOPped): every batch's jobs are
    committed and counted as unannounced, yet only the batches within the run's budget wait."""
    with socket.socket() as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen(64)  # the kernel completes connections; nobody ever reads or answers
        port = hung.getsockname()[1]
        dispatcher = RedisStreamDispatcher(
            f"redis://127.0.0.1:{port}/0", timeout_s=0.3, wait_per_run_s=0.5
        )
        targets = list(range(100, 120))
        _results, report = run_in_batches(
            san_db.engine, dispatcher, targets, 2, enqueue_batch(san_db, dispatcher)
        )
    assert report.batches == 10 and report.announce_failures == 20
    assert sorted(job.target_id for job in san_db.jobs()) == targets
    assert dispatcher.attempts == 2  # 0.3 s each: the budget is spent after the second
    assert "the fast lane announces them again" in caplog.text
    assert "announces nothing more" in caplog.text


def test_one_run_shares_one_redis_budget_across_its_areas(san_db):
    resource = JobDispatcherResource(kind="redis_stream", redis_url=REDIS_URL)
    assert resource.for_database(san_db.engine) is resource.for_database(san_db.engine)


def test_the_notify_channel_is_configurable_and_checked():
    assert build_dispatcher(
        "pg_notify", "postgresql", REDIS_URL, notify_channel="san_jobs_staging"
    ).statement_channel == ("san_jobs_staging")
    assert build_dispatcher(None, "postgresql", REDIS_URL).statement_channel == "san_jobs"
    for wrong in ("", "San-Jobs", "1jobs", "x" * 64, "jobs; DROP TABLE jobs"):
        with pytest.raises(DispatcherConfigError, match="SAN_NOTIFY_CHANNEL="):
            build_dispatcher("pg_notify", "postgresql", REDIS_URL, notify_channel=wrong)


def test_dispatcher_choice():
    assert build_dispatcher(None, "postgresql", REDIS_URL).kind == "pg_notify"
    assert build_dispatcher(None, "sqlite", REDIS_URL).kind == "none"
    assert build_dispatcher(" Redis_Stream ", "sqlite", REDIS_URL).kind == "redis_stream"
    with pytest.raises(
        DispatcherConfigError, match="SAN_JOB_DISPATCHER='kafka' is not a dispatcher"
    ):
        build_dispatcher("kafka", "postgresql", REDIS_URL)
    with pytest.raises(DispatcherConfigError, match="pg_notify needs PostgreSQL"):
        build_dispatcher("pg_notify", "sqlite", REDIS_URL)
