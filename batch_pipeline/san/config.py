"""Run config every writing job shares: batch size, timeouts and dry run; and the bounds every
numeric setting keeps, so its arithmetic stays inside what Python's datetimes and PostgreSQL's
timestamps and integer settings can hold (a value beyond is refused, naming the field, before
anything is written)."""

from dagster import Config
from pydantic import Field

from batch_pipeline.san.limits import (
    LOCK_TIMEOUT_MS,
    STATEMENT_TIMEOUT_MS,
    WriteLimits,
)

MAX_BATCH_SIZE = 50_000
# A year of minutes, ten years of hours: longer thresholds or windows mean nothing for jobs
# that take seconds, and now - 10**8 hours is before year 1.
MAX_MINUTES = 365 * 24 * 60
MAX_HOURS = 10 * 365 * 24
MAX_LOCK_TIMEOUT_MS = 10 * 60 * 1000
MAX_STATEMENT_TIMEOUT_MS = 24 * 60 * 60 * 1000
MAX_ATTEMPTS_CAP = 1_000
MAX_JOBS_PER_RUN = 10_000_000
MAX_BATCH_PAUSE_RATIO = 100.0


class WriteConfig(Config):
    batch_size: int | None = Field(
        default=None,
        gt=0,
        le=MAX_BATCH_SIZE,
        description="Rows per write transaction (each batch commits on its own). Unset: the "
        "throttle sizes each batch to about a quarter second of work on a quiet database (10 to "
        "5,000 rows), to about 20 ms of work while SAN's app is at work (docs/configuration.md, "
        '"The throttle"); a number fixes it.',
    )
    lock_timeout_ms: int = Field(
        default=LOCK_TIMEOUT_MS,
        gt=0,
        le=MAX_LOCK_TIMEOUT_MS,
        description="PostgreSQL `lock_timeout` for detection and each write batch: a table the "
        "app holds locked (a migration) is reported, not waited on. batch_pipeline's own writers "
        "wait for each other up to `statement_timeout_ms` instead.",
    )
    statement_timeout_ms: int = Field(
        default=STATEMENT_TIMEOUT_MS,
        gt=0,
        le=MAX_STATEMENT_TIMEOUT_MS,
        description="PostgreSQL `statement_timeout` for detection and each write batch (set per "
        "transaction; the server's own settings are untouched).",
    )
    batch_pause_ratio: float | None = Field(
        default=None,
        ge=0,
        le=MAX_BATCH_PAUSE_RATIO,
        description="Unset: between batches the throttle rests as SAN's database's signals say "
        "(none when no app session is at work; 25 to 60 times each batch's work while one is, "
        "more as the app's transactions slow down). A number: rest this many "
        "times each batch's own work (lock waits excluded; 0: back to back); the critical zone "
        "(an app session waiting for our locks, replica lag, overload) still rests 3 s.",
    )
    dry_run: bool = Field(
        default=False,
        description="Detect and report (an asset observation, not a materialization); write "
        "nothing.",
    )

    @property
    def write_limits(self) -> WriteLimits:
        return WriteLimits(
            lock_timeout_ms=self.lock_timeout_ms,
            statement_timeout_ms=self.statement_timeout_ms,
            batch_pause_ratio=self.batch_pause_ratio,
        )
