"""Bounds for one transaction and its batch: how many rows, how long a lock or a statement may
wait. Plain values, depended on by the dialects and everything above them."""

from dataclasses import dataclass

# Rows per write transaction: small enough that a batch holds its locks briefly, large enough
# that a round trip is amortised (docs/benchmarks.md, "Figures behind the code").
BATCH_SIZE = 5_000
LOCK_TIMEOUT_MS = 5_000
STATEMENT_TIMEOUT_MS = 120_000
# After each write batch, a pause of this many times the batch's own duration before the next,
# for a database whose app feels our writes (its commits flush the WAL our batches wrote). Off
# by default: it lowered the app's p99 during a run a little and doubled the run's time
# (docs/benchmarks.md, "The app's latency while batch_pipeline heals").
BATCH_PAUSE_RATIO = 0.0


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
