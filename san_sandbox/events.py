"""How the reference worker hears about new jobs: the same channels the pipeline announces on.

- pg_notify:    LISTEN san_jobs; every listener hears every job and the claim decides who runs it
- redis_stream: XREADGROUP on san:jobs in the consumer group `san-workers` (one consumer per job)
- none:         poll the jobs table for PENDING jobs (the README's "workers poll")

A lost event is a fault of the channel, so the worker applies it on receipt (ReferenceWorker.
handle): a job whose event is lost is never picked up, polling included, and stays PENDING until
the fast lane announces it again or ghost-job recovery replaces it with a new job; each
announcement is drawn afresh.
"""

import json
import os
import time

import redis
from sqlalchemy import func, select
from sqlalchemy.engine import Engine

from batch_pipeline.san.dispatch import (
    DISPATCHER_KINDS,
    PG_NOTIFY_CHANNEL,
    REDIS_STREAM,
    check_notify_channel,
)
from batch_pipeline.san.tables import PENDING, jobs

CONSUMER_GROUP = "san-workers"


class JobEvents:
    """A source of announced job ids."""

    def next_job_ids(self, timeout_s: float) -> list[int]:
        """The job ids announced since the last call; waits up to timeout_s for at least one."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class PgNotifyEvents(JobEvents):
    def __init__(self, engine: Engine, channel: str | None = None):
        channel = check_notify_channel(
            channel or os.environ.get("SAN_NOTIFY_CHANNEL") or PG_NOTIFY_CHANNEL
        )
        self._raw = engine.raw_connection()
        self._conn = self._raw.driver_connection  # the psycopg connection
        self._conn.autocommit = True
        self._conn.execute(f"LISTEN {channel}")

    def next_job_ids(self, timeout_s: float) -> list[int]:
        return [
            int(json.loads(n.payload)["job_id"])
            for n in self._conn.notifies(timeout=timeout_s, stop_after=1)
        ]

    def close(self) -> None:
        self._raw.close()


class RedisStreamEvents(JobEvents):
    def __init__(self, redis_url: str, consumer: str, stream: str = REDIS_STREAM):

        self.stream, self.consumer = stream, consumer
        self._redis = redis.Redis.from_url(redis_url)
        ensure_consumer_group(self._redis, stream)

    def next_job_ids(self, timeout_s: float) -> list[int]:
        reply = self._redis.xreadgroup(
            CONSUMER_GROUP,
            self.consumer,
            {self.stream: ">"},
            count=100,
            block=max(1, int(timeout_s * 1000)),
        )
        ids, job_ids = [], []
        for _stream, entries in reply or []:
            for entry_id, fields in entries:
                ids.append(entry_id)
                job_ids.append(int(fields[b"job_id"]))
        if ids:  # at most once: a worker that dies leaves the job PROCESSING, and recovery heals it
            self._redis.xack(self.stream, CONSUMER_GROUP, *ids)
        return job_ids

    def close(self) -> None:
        self._redis.close()


def ensure_consumer_group(client, stream: str = REDIS_STREAM) -> None:
    """Create the workers' group (at the stream's end) unless it exists: call before announcing."""

    try:
        client.xgroup_create(stream, CONSUMER_GROUP, id="$", mkstream=True)
    except redis.ResponseError as error:
        if "BUSYGROUP" not in str(error):
            raise


class PollingEvents(JobEvents):
    """No announcements: look for PENDING jobs newer than the last one seen, oldest first."""

    def __init__(self, engine: Engine, poll_every_s: float = 0.2):
        self.engine, self.poll_every_s = engine, poll_every_s
        # Like LISTEN, hear only jobs created from now on. Ids only grow; a job committed out of
        # order behind the cursor is never heard: a ghost, for recovery to heal.
        with engine.connect() as conn:
            self._cursor = conn.execute(select(func.coalesce(func.max(jobs.c.id), 0))).scalar_one()

    def next_job_ids(self, timeout_s: float) -> list[int]:
        deadline = time.monotonic() + timeout_s
        while True:
            with self.engine.connect() as conn:
                pending = (
                    conn.execute(
                        select(jobs.c.id)
                        .where(jobs.c.status == PENDING, jobs.c.id > self._cursor)
                        .order_by(jobs.c.id)
                        .limit(500)
                    )
                    .scalars()
                    .all()
                )
            if pending:
                self._cursor = pending[-1]
            if pending or time.monotonic() >= deadline:
                return list(pending)
            time.sleep(self.poll_every_s)


def open_job_events(kind: str, engine: Engine, *, redis_url: str, consumer: str) -> JobEvents:
    if kind not in DISPATCHER_KINDS:
        raise ValueError(
            f"unknown dispatcher {kind!r}; choose one of {', '.join(DISPATCHER_KINDS)}"
        )
    if kind == "pg_notify":
        return PgNotifyEvents(engine)
    if kind == "redis_stream":
        return RedisStreamEvents(redis_url, consumer)
    return PollingEvents(engine)
