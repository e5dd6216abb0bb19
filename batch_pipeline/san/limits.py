"""Bounds for one transaction and its batch: how many rows, how long a lock or a statement may
wait. Plain values, depended on by the dialects and everything above them."""

from dataclasses import dataclass

# How many rows a write transaction takes and how long the run rests between two is the
# throttle's (san/throttle.py): it steers by what SAN's database feels. An operator may fix
# either in the run config (`batch_size`, `batch_pause_ratio`): None leaves it to the throttle.
LOCK_TIMEOUT_MS = 5_000
STATEMENT_TIMEOUT_MS = 120_000


@dataclass(frozen=True)
class WriteLimits:
    """Bounds for one transaction (detection or a write batch), so a locked or busy table is
    reported, never waited on forever."""

    lock_timeout_ms: int = LOCK_TIMEOUT_MS
    statement_timeout_ms: int = STATEMENT_TIMEOUT_MS
    # rest this many times each batch's own work (lock waits excluded); None: the throttle's law
    batch_pause_ratio: float | None = None
