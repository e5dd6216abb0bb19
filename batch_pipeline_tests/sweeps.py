"""Detections' sweeps (san/sweep.py) made small and watched: a few rows make several chunks,
and a test sees how many chunks each sweep read."""

from batch_pipeline.san import sweep
from batch_pipeline.san.throttle import ThrottleState


def small_chunks(monkeypatch, ceiling: int) -> None:
    """Chunks of `ceiling` ids or rows."""
    monkeypatch.setattr(
        sweep,
        "CHUNK_AIMS",
        ThrottleState(batch_size=ceiling, max_batch=ceiling, fallback_rest_ratio=0.0),
    )


def chunks_of_each_sweep(monkeypatch, module, name: str) -> list[int]:
    """The chunks each call of `module.name` (a sweep it imported) read, one entry per call."""
    chunks: list[int] = []
    sweeping = getattr(sweep, name)

    def spied(*args, **kwargs):
        rows, log = sweeping(*args, **kwargs)
        chunks.append(log.batches)
        return rows, log

    monkeypatch.setattr(module, name, spied)
    return chunks
