"""Bounds for one transaction and its batch: how many rows, how long a lock or a statement may
wait. Plain values, depended on by the dialects and everything above them."""

from dataclasses import dataclass

# Rows per write transaction, and after each one a pause of BATCH_PAUSE_RATIO times its own
# duration before the next. The app's commits flush the WAL our statements write, so what it
# feels is how often one of its transactions meets a write statement of ours: small batches
# with long rests (a write duty cycle of 1/31) held its p99 during a scale-1 recovery run at
# 1.1-1.8x its quiet p99 (rests 10x as long: 1.6-2.1x); a run's writes take about 80 times
# as long as 5,000-row batches back to back (docs/benchmarks.md, "The app's latency while
# batch_pipeline heals").
# An operator healing a backlog on a quiet database may set 5,000 and 0.
BATCH_SIZE = 100
BATCH_PAUSE_RATIO = 30.0
LOCK_TIMEOUT_MS = 5_000
STATEMENT_TIMEOUT_MS = 120_000


@dataclass(frozen=True)
class WriteLimits:
    """Bounds for one transaction (detection or a write batch), so a locked or busy table is
    reported, never waited on forever."""

    lock_timeout_ms: int = LOCK_TIMEOUT_MS
    statement_timeout_ms: int = STATEMENT_TIMEOUT_MS
    batch_pause_ratio: float = BATCH_PAUSE_RATIO

    def pause_after(self, batch_seconds: float) -> float:
        """Seconds to rest after a write batch that took `batch_seconds`."""
        return self.batch_pause_ratio * batch_seconds
