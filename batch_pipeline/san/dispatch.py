"""Announcing new jobs to SAN's workers.

The `jobs` row is the source of truth; an announcement only wakes a worker. `pg_notify` is sent
inside the transaction that inserts the job, so PostgreSQL delivers it exactly when the job
commits. The Redis stream is written after commit: a failed publish is logged and counted, the
job stays PENDING, and the fast lane announces it again within seconds (with SAN_REANNOUNCE
off, ghost-job recovery re-enqueues it once it is a ghost).
"""

import logging
import re
import time
from collections.abc import Sequence
from typing import NamedTuple

import redis
from sqlalchemy.engine import Connection, make_url

from batch_pipeline.san.database import redacted
from batch_pipeline.san.dialects import DIALECTS, dialect
from batch_pipeline.san.settings import Setting

log = logging.getLogger(__name__)

PG_NOTIFY_CHANNEL = "san_jobs"
REDIS_STREAM = "san:jobs"
DISPATCHER_KINDS = ("pg_notify", "redis_stream", "none")
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"

SAN_JOB_DISPATCHER = Setting(
    "SAN_JOB_DISPATCHER",
    "`pg_notify` on PostgreSQL, `none` on SQLite",
    "`pg_notify`, `redis_stream` or `none`; anything else fails the run's first step",
)
SAN_REDIS_URL = Setting("SAN_REDIS_URL", DEFAULT_REDIS_URL, "Redis for `redis_stream`", secret=True)
SAN_REDIS_STREAM = Setting(
    "SAN_REDIS_STREAM",
    REDIS_STREAM,
    "the stream `redis_stream` writes to (the one SAN's workers read)",
)
SAN_NOTIFY_CHANNEL = Setting(
    "SAN_NOTIFY_CHANNEL",
    PG_NOTIFY_CHANNEL,
    "the channel `pg_notify` announces on (the one SAN's workers LISTEN on); two SAN environments "
    "can share a server. Lower-case letters, digits, `_`",
)


class NewJob(NamedTuple):
    """A job batch_pipeline created, as announced to the workers. (A NamedTuple: a run builds
    tens of thousands, and a tuple is much cheaper to build than a frozen dataclass: see
    docs/benchmarks.md, "Figures behind the code".)"""

    job_id: int
    job_type: str
    target_id: int
    retry_of_job_id: int | None = None

    def payload(self) -> dict:
        return {"job_id": self.job_id, "job_type": self.job_type, "target_id": self.target_id}


def redact_secrets(text: str, url: str) -> str:
    """`text` (an error message) with the URL's password masked wherever it appears."""
    try:
        password = make_url(url).password
    except Exception:  # an unparseable URL has no password to find
        return text
    return text.replace(str(password), "***") if password else text


class DispatcherConfigError(ValueError):
    """SAN_JOB_DISPATCHER names an unknown dispatcher or one the database cannot serve."""


class Dispatcher:
    """Rows only (`none`): workers find PENDING jobs by polling the jobs table."""

    kind = "none"
    # A pg_notify channel the write statements may announce on themselves (postgresql.notify_jobs):
    # the payloads then come from the inserted rows, with no second statement per batch.
    statement_channel: str | None = None

    def announce_in_transaction(self, conn: Connection, new_jobs: Sequence[NewJob]) -> None:
        """Called inside the batch transaction, after the jobs are inserted."""

    def announce_after_commit(self, new_jobs: Sequence[NewJob]) -> int:
        """Called after the batch commits; returns how many announcements failed."""
        return 0


# A channel SAN's workers can LISTEN on without quoting.
_CHANNEL_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def check_notify_channel(channel: str) -> str:
    if not _CHANNEL_NAME.fullmatch(channel or ""):
        raise DispatcherConfigError(
            f"SAN_NOTIFY_CHANNEL={channel!r} is not a pg_notify channel name (lower-case letters, "
            "digits "
            "and _, at most 63, not starting with a digit; e.g. san_jobs)"
        )
    return channel


class PgNotifyDispatcher(Dispatcher):
    kind = "pg_notify"

    def __init__(self, channel: str = PG_NOTIFY_CHANNEL):
        self.statement_channel = check_notify_channel(channel)
        self._notify = None

    def announce_in_transaction(self, conn: Connection, new_jobs: Sequence[NewJob]) -> None:
        """For write paths that could not announce in their own statement: the payloads are
        built from the rows just inserted; one bigint array goes over the wire, not text."""
        if new_jobs:
            if self._notify is None:
                self._notify = dialect(conn).announce_statement(self.statement_channel)
            conn.execute(self._notify, {"job_ids": [job.job_id for job in new_jobs]})


# What a run may wait, in all, on a Redis that does not answer (stopped, hung, unreachable):
# each write batch waits for its own publish, so without a bound for the whole run a hung Redis
# would cost `timeout_s` per batch (a run of 2,000 batches: hours). Past it, the run announces
# nothing more and counts the rest as failures; the jobs are committed either way.
REDIS_WAIT_PER_RUN_S = 15.0


class RedisStreamDispatcher(Dispatcher):
    kind = "redis_stream"

    def __init__(
        self,
        redis_url: str,
        stream: str = REDIS_STREAM,
        timeout_s: float = 5.0,
        wait_per_run_s: float = REDIS_WAIT_PER_RUN_S,
    ):
        self.redis_url = redis_url
        self.stream = stream
        self.timeout_s = timeout_s
        self.wait_left_s = wait_per_run_s  # spent by publishes that failed, never refilled
        self.attempts = 0
        self._client = None

    def _redis(self):
        if self._client is None:
            self._client = redis.Redis.from_url(
                self.redis_url, socket_timeout=self.timeout_s, socket_connect_timeout=self.timeout_s
            )
        return self._client

    def ping(self) -> None:
        """Raise if Redis cannot be reached (used by `doctor`)."""
        self._redis().ping()

    def announce_after_commit(self, new_jobs: Sequence[NewJob]) -> int:
        if not new_jobs:
            return 0
        if self.wait_left_s <= 0:  # this run waited long enough on Redis: count, do not wait
            return len(new_jobs)
        self.attempts += 1
        started = time.monotonic()
        try:
            pipe = self._redis().pipeline(transaction=False)
            for job in new_jobs:
                pipe.xadd(self.stream, {key: str(value) for key, value in job.payload().items()})
            pipe.execute()
        except Exception as error:  # the job rows are committed; the fast lane announces again
            self.wait_left_s -= time.monotonic() - started
            log.warning(
                "could not announce %d job(s) on Redis stream %s at %s: %s; they stay PENDING "
                "and the fast lane announces them again (with SAN_REANNOUNCE=off, ghost-job "
                "recovery re-enqueues them as ghosts)%s",
                len(new_jobs),
                self.stream,
                redacted(self.redis_url),
                redact_secrets(str(error), self.redis_url),
                "; this run waited on Redis long enough and announces nothing more"
                if self.wait_left_s <= 0
                else "",
            )
            return len(new_jobs)
        return 0


def build_dispatcher(
    kind: str | None,
    dialect_name: str,
    redis_url: str,
    redis_stream: str = REDIS_STREAM,
    notify_channel: str = PG_NOTIFY_CHANNEL,
) -> Dispatcher:
    """The dispatcher SAN_JOB_DISPATCHER names; unset: the database's default (pg_notify on
    PostgreSQL, none on SQLite)."""
    sql = DIALECTS[dialect_name]
    chosen = (kind or "").strip().lower() or sql.DEFAULT_DISPATCHER
    if chosen not in DISPATCHER_KINDS:
        raise DispatcherConfigError(
            f"SAN_JOB_DISPATCHER={kind!r} is not a dispatcher; choose one of "
            f"{', '.join(DISPATCHER_KINDS)}"
        )
    if chosen == "pg_notify":
        if sql.announce_statement(check_notify_channel(notify_channel)) is None:
            raise DispatcherConfigError(
                "SAN_JOB_DISPATCHER=pg_notify needs PostgreSQL, but the SAN database is "
                f"{dialect_name}"
            )
        return PgNotifyDispatcher(notify_channel)
    if chosen == "redis_stream":
        return RedisStreamDispatcher(redis_url, stream=redis_stream)
    return Dispatcher()
