"""Pausing Python's cyclic garbage collector while an op builds many short-lived objects."""

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_gc() -> Iterator[None]:
    """A Dagster process holds a great many long-lived objects (Dagster, pandas, SQLAlchemy);
    every full collection walks all of them, and building the rows, frames and id lists of a
    batch of thousands triggers one every few thousand allocations, a large share of a write
    op's time at scale (docs/benchmarks.md, "Figures behind the code"). Reference counting
    still frees everything an op drops; only reference cycles wait for the end of the block."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
