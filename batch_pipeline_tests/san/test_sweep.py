"""A detection's sweep in keyset chunks (san/sweep.py), on both dialects: every id of the range
read once, in id order, in chunks of at most the ceiling (sparse ids included); and the full
sweep of a recovery finds exactly what one statement over the whole table finds."""

import math
from dataclasses import replace

from sqlalchemy import func, select, text, tuple_

from batch_pipeline.recovery import targets
from batch_pipeline.recovery.orphan_scraps import ORPHAN_SCRAPS
from batch_pipeline.recovery.targets import ORPHAN_MIN_AGE, detect_query, detect_targets
from batch_pipeline.recovery.unrefined_scraps import UNREFINED_SCRAPS
from batch_pipeline.san import sweep
from batch_pipeline.san.tables import CARD_ANALYSIS, PENDING, scraps
from batch_pipeline.san.throttle import APP_BATCH_SECONDS, BUSY, MIN_BATCH, Signals, decide
from batch_pipeline_tests import sweeps

CEILING = 7


def small_chunks(monkeypatch) -> None:
    """Chunks of CEILING ids: a few rows make several chunks."""
    sweeps.small_chunks(monkeypatch, CEILING)


def test_every_id_is_read_once_in_order_in_chunks_no_larger_than_the_ceiling(san_db, monkeypatch):
    small_chunks(monkeypatch)
    user = san_db.user()
    ids = [san_db.scrap(user) for _ in range(20)]
    with san_db.engine.begin() as conn:  # a gap in the ids: the sweep does not need them dense
        conn.execute(
            text("DELETE FROM scraps WHERE id > :a AND id < :b"), {"a": ids[3], "b": ids[15]}
        )
    kept = ids[:4] + ids[15:]
    chunks = []

    def read_chunk(after, upto):
        chunk = (scraps.c.id > after) & (scraps.c.id <= upto)
        found = conn.execute(scraps.select().where(chunk).order_by(scraps.c.id)).all()
        chunks.append([row.id for row in found])
        return found

    with san_db.engine.connect() as conn:
        rows, log = sweep.swept(conn, scraps.c.id, read_chunk)
    assert [row.id for row in rows] == kept
    assert len(chunks) == math.ceil((ids[-1] - ids[0] + 1) / CEILING) == log.batches
    assert all(len(chunk) <= CEILING for chunk in chunks)


def test_while_the_app_works_a_chunk_reads_for_less_time_than_a_write_batch_writes():
    """A chunk holds a core all along: while the app works it is BUSY_CHUNK_SECONDS of reading,
    shorter than a write batch's APP_BATCH_SECONDS."""
    id_cost = 1e-6  # seconds per id read
    state = replace(sweep.CHUNK_AIMS, baseline=0.001, seconds_per_row=id_cost, batch_size=50_000)
    app_at_work = Signals(0.001, 0, 0, None, cores=2, app_sessions_at_work=3)
    step = decide(state, app_at_work, 50_000, 50_000 * id_cost)
    assert step.state.zone == BUSY
    assert step.state.batch_size == int(sweep.BUSY_CHUNK_SECONDS / id_cost)
    assert sweep.BUSY_CHUNK_SECONDS < APP_BATCH_SECONDS


def chunk_sizes_under_a_slow_round_trip(aims, chunks: int = 200) -> list[int]:
    """A saturated database's chunks, each a fixed 6 ms (a round trip waiting for a core: more
    than a busy chunk's aim) plus 1 us per id, the app at work: the size of each next chunk."""
    state = replace(aims, baseline=0.001, seconds_per_row=1e-6, batch_size=5_000)
    app_at_work = Signals(0.0015, 0, 0, None, cores=2, app_sessions_at_work=4)
    sizes = []
    for _ in range(chunks):
        ids = state.batch_size
        state = decide(state, app_at_work, ids, 0.006 + ids * 1e-6).state
        sizes.append(state.batch_size)
    return sizes


def test_a_slow_round_trip_never_shrinks_a_busy_chunk_below_its_floor():
    """The chunk's fixed cost is in its cost per id, so a smaller chunk looks dearer and the next
    is smaller still; without the floor the sweep falls to MIN_BATCH ids a chunk."""
    sizes = chunk_sizes_under_a_slow_round_trip(sweep.CHUNK_AIMS)
    assert min(sizes) == sweep.FIRST_CHUNK_IDS == sizes[-1]
    without = chunk_sizes_under_a_slow_round_trip(replace(sweep.CHUNK_AIMS, busy_floor=MIN_BATCH))
    assert without[-1] == MIN_BATCH


def test_an_empty_table_is_no_chunk(san_db):
    with san_db.engine.connect() as conn:
        rows, log = sweep.swept(conn, scraps.c.id, lambda after, upto: [])
    assert rows == [] and log.batches == 0


def test_keys_already_read_are_swept_a_chunk_at_a_time_in_their_order(san_db, monkeypatch):
    small_chunks(monkeypatch)
    keys = [5, 3, 99, 1, *range(200, 220)]
    chunks = []

    def read_chunk(some_keys):
        chunks.append(list(some_keys))
        return [(key, key * 2) for key in some_keys]

    with san_db.engine.connect() as conn:
        rows, log = sweep.swept_among(conn, keys, read_chunk)
        nothing, none_read = sweep.swept_among(conn, [], read_chunk)
    assert rows == [(key, key * 2) for key in keys]
    assert [key for chunk in chunks for key in chunk] == keys
    assert len(chunks) == math.ceil(len(keys) / CEILING) == log.batches
    assert nothing == [] and none_read.batches == 0


def test_a_list_of_keys_is_never_bound_past_what_sqlite_takes(san_db, monkeypatch):
    """However cheap a chunk, a list chunk binds at most MAX_CHUNK_KEYS parameters (SQLite
    builds refuse more than 32,766 by default)."""
    sweeps.small_chunks(monkeypatch, 10 * sweep.MAX_CHUNK_KEYS)
    keys = list(range(4 * sweep.MAX_CHUNK_KEYS))
    sizes = []

    def read_chunk(some_keys):
        sizes.append(len(some_keys))
        return conn.execute(select(func.count()).where(scraps.c.id.in_(some_keys))).all()

    with san_db.engine.connect() as conn:
        rows, _ = sweep.swept_among(conn, keys, read_chunk)
    assert sum(sizes) == len(keys) and max(sizes) <= sweep.MAX_CHUNK_KEYS
    assert rows == [(0,)] * len(sizes)


def test_a_recovery_s_full_sweep_finds_what_one_statement_finds(san_db, monkeypatch):
    small_chunks(monkeypatch)
    user = san_db.user()
    for number in range(30):
        scrap = san_db.scrap(
            user,
            created_at=san_db.ago(hours=3, minutes=number % 7),  # not in id order
            card=number % 3 == 0,
            refined=number % 4 != 0,
        )
        if number % 5 == 0:
            san_db.job(CARD_ANALYSIS, scrap, PENDING, created_at=san_db.ago(minutes=5))
    created_before = san_db.now - ORPHAN_MIN_AGE
    chunks = sweeps.chunks_of_each_sweep(monkeypatch, targets, "swept")
    for recovery in (ORPHAN_SCRAPS, UNREFINED_SCRAPS):
        with san_db.engine.connect() as conn:
            whole = recovery.frame.from_rows(
                conn.execute(detect_query(recovery, created_before=created_before))
            )
            chunked = detect_targets(conn, recovery, now=san_db.now)
        assert chunks.pop() >= 30 / CEILING  # in chunks
        assert chunked.to_dict("records") == whole.to_dict("records"), recovery.area


def test_a_sweep_past_a_key_reads_every_row_once_in_key_order_across_ties(san_db, monkeypatch):
    small_chunks(monkeypatch)
    user = san_db.user()
    instants = [san_db.ago(hours=1)] * 9 + [san_db.ago(minutes=m) for m in (50, 40, 30)]
    ids = [san_db.scrap(user, created_at=instant) for instant in instants]
    chunks = []

    def read_chunk(after, limit):
        past = tuple_(scraps.c.created_at, scraps.c.id) > tuple_(*after)
        query = scraps.select().where(past).order_by(scraps.c.created_at, scraps.c.id)
        found = conn.execute(query.limit(limit)).all()
        chunks.append(len(found))
        return found

    with san_db.engine.connect() as conn:
        rows, log = sweep.swept_after(
            conn, (san_db.ago(days=1), 0), read_chunk, lambda row: (row.created_at, row.id)
        )
    assert [row.id for row in rows] == ids  # the tie on one instant broken by id
    assert chunks == [CEILING, len(ids) - CEILING] == [7, 5] and log.batches == 2
