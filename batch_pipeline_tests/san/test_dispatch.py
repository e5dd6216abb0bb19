"""Announcing new jobs: pg_notify in the transaction, Redis stream after commit, or rows only."""

import json
import uuid

import psycopg
import pytest
import redis
from sqlalchemy.engine import make_url

from batch_pipeline.san.database import write_transaction
from batch_pipeline.san.dispatch import (
    DispatcherConfigError, NewJob, PgNotifyDispatcher, RedisStreamDispatcher, build_dispatcher,
)
from batch_pipeline.san.enqueue import EnqueueRequest, enqueue_jobs, run_in_batches
from batch_pipeline.san.schema import CARD_ANALYSIS

REDIS_URL = "redis://127.0.0.1:6379/0"


def listener(db):
    url = make_url(db.url)
    conn = psycopg.connect(host=url.host, port=url.port or 5432, user=url.username, dbname=url.database, autocommit=True)
    conn.execute("LISTEN san_jobs")
    return conn


def enqueue_batch(db, target_ids):
    def write(conn, batch):
        outcome = enqueue_jobs(conn, CARD_ANALYSIS, [EnqueueRequest(t) for t in batch], now=db.now, max_attempts=10)
        return outcome, outcome.created
    return write


def test_pg_notify_payloads_arrive_when_the_jobs_commit(pg_db):
    conn = listener(pg_db)
    try:
        results, report = run_in_batches(pg_db.engine, PgNotifyDispatcher(), [11, 12, 13], 2, enqueue_batch(pg_db, None))
        created = [job for outcome in results for job in outcome.created]
        payloads = [json.loads(n.payload) for n in conn.notifies(timeout=2, stop_after=3)]
    finally:
        conn.close()
    assert report.batches == 2
    assert sorted(payloads, key=lambda p: p["job_id"]) == [
        {"job_id": job.job_id, "job_type": CARD_ANALYSIS, "target_id": job.target_id} for job in created
    ]
    assert sorted(p["target_id"] for p in payloads) == [11, 12, 13]


def test_pg_notify_is_not_sent_when_the_batch_rolls_back(pg_db):
    conn = listener(pg_db)
    try:
        with pytest.raises(RuntimeError):
            with write_transaction(pg_db.engine) as tx:
                PgNotifyDispatcher().announce_in_transaction(tx, [NewJob(1, CARD_ANALYSIS, 1)])
                raise RuntimeError("process died before commit")
        assert list(conn.notifies(timeout=0.5)) == []
    finally:
        conn.close()


def test_redis_stream_gets_one_entry_per_job_after_commit(san_db):
    stream = f"san:jobs:test:{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(REDIS_URL)
    try:
        results, report = run_in_batches(
            san_db.engine, RedisStreamDispatcher(REDIS_URL, stream=stream), [21, 22], 10, enqueue_batch(san_db, None)
        )
        entries = client.xrange(stream)
    finally:
        client.delete(stream)
    created = results[0].created
    assert report.announce_failures == 0
    assert [{k.decode(): v.decode() for k, v in fields.items()} for _, fields in entries] == [
        {"job_id": str(job.job_id), "job_type": CARD_ANALYSIS, "target_id": str(job.target_id)} for job in created
    ]


def test_redis_down_keeps_the_jobs_and_counts_the_failures(san_db, caplog):
    dead = RedisStreamDispatcher("redis://127.0.0.1:1/0", timeout_s=0.5)
    results, report = run_in_batches(san_db.engine, dead, [31, 32], 10, enqueue_batch(san_db, None))
    assert report.announce_failures == 2
    assert sorted(j.target_id for j in san_db.jobs()) == [31, 32]
    assert "could not announce 2 job(s)" in caplog.text


def test_dispatcher_choice():
    assert build_dispatcher(None, "postgresql", REDIS_URL).kind == "pg_notify"
    assert build_dispatcher(None, "sqlite", REDIS_URL).kind == "none"
    assert build_dispatcher(" Redis_Stream ", "sqlite", REDIS_URL).kind == "redis_stream"
    with pytest.raises(DispatcherConfigError, match="SAN_JOB_DISPATCHER='kafka' is not a dispatcher"):
        build_dispatcher("kafka", "postgresql", REDIS_URL)
    with pytest.raises(DispatcherConfigError, match="pg_notify needs PostgreSQL"):
        build_dispatcher("pg_notify", "sqlite", REDIS_URL)
