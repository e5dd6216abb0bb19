"""A detection's sweep of a whole table in keyset chunks: its ids in ranges (lo, hi], one
statement each, sized and paced by the write path's throttle (san/throttle.py), so no statement
of ours holds a core for long, and between two chunks a busy app gets the database back.

A chunk aims at CHUNK_SECONDS of work on a quiet database, at most MAX_CHUNK_IDS ids (a range
of the primary key, or of an index on it: a range scan); the ids need not be dense. Without
signals (SQLite) the chunks do not rest: the statement bound is what a sweep needs there.

`swept_among` is the same sweep over keys already read (the targets a first statement found,
whose related rows a second one reads): each chunk is the next keys of the list.

`swept_after` is the same sweep over a key that is not an integer range (the TIL day's scraps,
in (created_at, id) order on the created_at index): each chunk is the next rows past the last
key read, at most as many as the throttle allows.

How a sweep was paced travels with the frame its detection returns (`with_sweep_pacing`), so
the area's audit says how long the detection read and rested, and why, beside its writes'.
"""

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import pandas as pd
from sqlalchemy import ColumnElement, Integer, bindparam, func, select
from sqlalchemy.engine import Connection

from batch_pipeline.san.enqueue import throttle_for
from batch_pipeline.san.limits import WriteLimits
from batch_pipeline.san.progress import Progress
from batch_pipeline.san.throttle import ThrottleLog, ThrottleState

CHUNK_SECONDS = 0.1  # well inside the 250 ms a statement of ours may take
# While the app works: a chunk reads on a core all along, and an app transaction that meets it
# waits for that core (at the write batches' 0.02 s, chunks ran beside 38 % of the app's slowest
# transactions in 1 % of the run's time; docs/benchmarks.md, "The feedback throttle"); a
# chunk's fixed cost is a round trip, not a plan of writes, so short chunks cost the sweep little.
BUSY_CHUNK_SECONDS = 0.005
FIRST_CHUNK_IDS = 1_000
MAX_CHUNK_IDS = 50_000
MAX_CHUNK_KEYS = 10_000  # keys are bound as parameters: 32,766 at most in SQLite by default
# While the app works, a chunk never spans fewer than FIRST_CHUNK_IDS ids (about 4 ms of reading
# at scale 1 when its round trip is not slowed): a round trip slowed by a saturated database
# made smaller chunks look dearer per id, down to 10 ids (docs/benchmarks.md, "The feedback
# throttle")
CHUNK_AIMS = ThrottleState(
    batch_size=FIRST_CHUNK_IDS,
    target_seconds=CHUNK_SECONDS,
    max_batch=MAX_CHUNK_IDS,
    busy_seconds=BUSY_CHUNK_SECONDS,
    busy_floor=FIRST_CHUNK_IDS,
    fallback_rest_ratio=0.0,
)
# A chunk's range (after, upto] as bind parameters: a sweep builds its statement once and binds
# each chunk's range (building and keying a detection's statement anew took about 1 ms of Python
# a chunk, a sixth of a busy chunk's time; docs/benchmarks.md, "The feedback throttle")
CHUNK_AFTER = bindparam("chunk_after", type_=Integer)
CHUNK_UPTO = bindparam("chunk_upto", type_=Integer)
Bound = int | ColumnElement  # a range's end: a value, or CHUNK_AFTER / CHUNK_UPTO
DETECTION = "detection sweep"  # how its progress lines name a sweep (san/progress.py)
# the frame's attrs key (pandas keeps attrs through pickling: the IO manager's hand-over)
SWEEP_PACING = "detection_throttle"


def with_sweep_pacing(frame: pd.DataFrame, log: ThrottleLog) -> pd.DataFrame:
    """`frame`, carrying how the sweep that read it was paced (ThrottleLog.metadata)."""
    frame.attrs[SWEEP_PACING] = log.metadata()
    return frame


def sweep_pacing(frame: pd.DataFrame) -> dict:
    """How the sweep behind `frame` was paced; {} for a frame read without one."""
    return dict(frame.attrs.get(SWEEP_PACING, {}))


def chunk_range(after: int, upto: int) -> dict[str, int]:
    """The parameters binding CHUNK_AFTER and CHUNK_UPTO to a chunk's range (after, upto]."""
    return {CHUNK_AFTER.key: after, CHUNK_UPTO.key: upto}


def swept(
    conn: Connection,
    id_column: ColumnElement,
    read_chunk: Callable[[int, int], Sequence],
    limits: WriteLimits = WriteLimits(),
) -> tuple[list, ThrottleLog]:
    """The rows `read_chunk(after, upto)` returns for every chunk of `id_column`'s range (the
    chunk's ids are in (after, upto]: a statement over CHUNK_AFTER and CHUNK_UPTO, executed
    with `chunk_range(after, upto)`), in id order, and how the sweep was paced."""
    lowest, highest = conn.execute(select(func.min(id_column), func.max(id_column))).one()
    span_of_ids = 0 if highest is None else highest - lowest + 1
    sweeping = Progress(DETECTION, "ids", span_of_ids, verb="read")
    throttle = throttle_for(conn.engine, None, limits, CHUNK_AIMS, sweeping)
    rows: list = []
    after = (lowest or 0) - 1
    try:
        while highest is not None and after < highest:
            span = throttle.next_batch()
            started = time.monotonic()
            rows.extend(read_chunk(after, after + span))
            throttle.written(span, time.monotonic() - started)
            after += span
    finally:
        throttle.close()
    return rows, throttle.log


def swept_among(
    conn: Connection,
    keys: Sequence,
    read_chunk: Callable[[Sequence], Sequence],
    limits: WriteLimits = WriteLimits(),
) -> tuple[list, ThrottleLog]:
    """The rows `read_chunk(some_keys)` returns for every chunk of `keys`, in their order, and
    how the sweep was paced."""
    most = min(CHUNK_AIMS.max_batch, MAX_CHUNK_KEYS)
    aims = replace(CHUNK_AIMS, batch_size=min(CHUNK_AIMS.batch_size, most), max_batch=most)
    throttle = throttle_for(
        conn.engine, None, limits, aims, Progress(DETECTION, "keys", len(keys), verb="read")
    )
    rows: list = []
    start = 0
    try:
        while start < len(keys):
            span = throttle.next_batch()
            started = time.monotonic()
            rows.extend(read_chunk(keys[start : start + span]))
            throttle.written(span, time.monotonic() - started)
            start += span
    finally:
        throttle.close()
    return rows, throttle.log


def swept_after(
    conn: Connection,
    first_key: Any,
    read_chunk: Callable[[Any, int], Sequence],
    key_of: Callable[[Any], Any],
    limits: WriteLimits = WriteLimits(),
) -> tuple[list, ThrottleLog]:
    """The rows `read_chunk(after, limit)` returns, chunk after chunk: at most `limit` rows
    past the key `after`, in key order (`key_of(row)`: a row's key), starting after
    `first_key`; and how the sweep was paced."""
    throttle = throttle_for(
        conn.engine, None, limits, CHUNK_AIMS, Progress(DETECTION, "rows", None, verb="read")
    )
    rows: list = []
    after = first_key
    try:
        while True:
            limit = throttle.next_batch()
            started = time.monotonic()
            chunk = read_chunk(after, limit)
            throttle.written(max(len(chunk), 1), time.monotonic() - started)
            rows.extend(chunk)
            if len(chunk) < limit:
                return rows, throttle.log
            after = key_of(chunk[-1])
    finally:
        throttle.close()
