"""Run config every writing job shares: batch size, timeouts and dry run."""

from dagster import Config
from pydantic import Field

from batch_pipeline.san.limits import BATCH_SIZE, LOCK_TIMEOUT_MS, STATEMENT_TIMEOUT_MS, WriteLimits

MAX_BATCH_SIZE = 50_000


class WriteConfig(Config):
    batch_size: int = Field(
        default=BATCH_SIZE, gt=0, le=MAX_BATCH_SIZE, description="Rows per write transaction."
    )
    lock_timeout_ms: int = Field(
        default=LOCK_TIMEOUT_MS,
        gt=0,
        description="PostgreSQL lock_timeout for detection and each write batch.",
    )
    statement_timeout_ms: int = Field(
        default=STATEMENT_TIMEOUT_MS,
        gt=0,
        description="PostgreSQL statement_timeout for detection and each write batch.",
    )
    dry_run: bool = Field(default=False, description="Detect and report; write nothing.")

    @property
    def write_limits(self) -> WriteLimits:
        return WriteLimits(
            lock_timeout_ms=self.lock_timeout_ms, statement_timeout_ms=self.statement_timeout_ms
        )
