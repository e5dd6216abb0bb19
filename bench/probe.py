"""The fast lane's probe at scale: the statements one fast_heal_sensor tick runs, their plans
and their time, on a seeded database with the recommended indexes."""

import statistics
import time
from collections.abc import Callable
from datetime import datetime

import psycopg

from batch_pipeline.fast_lane.announcements import (
    REANNOUNCE_FLOOR,
    LaneWindow,
    announcement_ages,
    claim_sample_query,
    due_announcements_query,
)
from batch_pipeline.fast_lane.retries import failed_targets_query, recent_failures, unqueued_query
from batch_pipeline.fast_lane.tick import PROBE_INTERVAL, LaneSettings, LaneState, lane_tick
from batch_pipeline.recovery.registry import TARGET_RECOVERIES
from batch_pipeline.san.database import create_san_engine, read_transaction
from batch_pipeline.san.dialects.postgresql import BEGIN_SETTINGS
from batch_pipeline.san.dispatch import Dispatcher

PROBE_REPEATS = 20


class Silent(Dispatcher):
    """Announces nothing, but is not `none`: a tick reads all it would announce."""

    kind = "bench"


def probe_queries(conn, now: datetime, settings: LaneSettings = LaneSettings()):
    """(name, SQLAlchemy statement) of every statement of one tick at its costliest (the one
    that also reads the claim-latency sample; `conn`: the recent failures are read first, as the
    tick does)."""
    window = LaneWindow(since=now - PROBE_INTERVAL, until=now)
    yield "lane: claim-latency sample", claim_sample_query()
    yield (
        "lane: unclaimed PENDING jobs",
        due_announcements_query(window, announcement_ages(REANNOUNCE_FLOOR)),
    )
    for recovery in TARGET_RECOVERIES:
        yield f"lane: {recovery.name} recent failures", recent_failures(recovery, now).distinct()
        yield f"lane: {recovery.name} failed", failed_targets_query(conn, recovery, now)
        yield f"lane: {recovery.name} never enqueued", unqueued_query(recovery, now, settings.grace)


def database_ms(conn: psycopg.Connection, sql: str, params: dict) -> float:
    """The server's own planning + execution time of one statement (EXPLAIN ANALYZE without
    per-node timing, whose clock calls would inflate it), in a transaction with the settings
    the code's own transactions start with (JIT off among them: the server's default JIT
    compiles the claim-latency sample for 5 ms, since it cannot estimate its id range)."""
    with conn.transaction():
        conn.execute(BEGIN_SETTINGS)
        explain = "EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) " + sql
        [[plan]] = conn.execute(explain, params).fetchone()
    return plan["Planning Time"] + plan["Execution Time"]


def probe_figures(
    conn: psycopg.Connection,
    url: str,
    now: datetime,
    plan_shape: Callable,
    out,
    repeats: int = PROBE_REPEATS,
) -> float:
    """Print each probe statement's plan; time whole probes, as database time (the server's
    planning + execution, summed over the statements) and as this process's wall time (with
    SQLAlchemy and pandas); return the median database time in ms."""
    engine = create_san_engine(url)
    try:
        statements = []
        with read_transaction(engine) as sa_conn:
            queries = list(probe_queries(sa_conn, now))
        for name, query in queries:
            compiled = query.compile(
                dialect=engine.dialect, compile_kwargs={"render_postcompile": True}
            )
            statements.append((str(compiled), compiled.params))
            out(f"  {name:34s} {plan_shape(conn, str(compiled), compiled.params)}")
        rounds = [
            [database_ms(conn, sql, params) for sql, params in statements]
            for _ in range(repeats + 1)
        ]
        in_database = sorted(sum(times) for times in rounds)[:-1]  # the cold first one dropped
        for (name, _query), *times in zip(queries, *rounds, strict=True):
            out(f"  {name:34s} {statistics.median(times):6.2f} ms (median of {len(times)})")
        wall, tick = [], None
        for _ in range(repeats + 1):  # the first one warms the connection pool
            state = LaneState(until=now - PROBE_INTERVAL)  # no estimate yet: the costliest tick
            started = time.perf_counter()
            tick = lane_tick(engine, Silent(), state, LaneSettings(), TARGET_RECOVERIES)
            wall.append((time.perf_counter() - started) * 1000)
        wall = sorted(wall[1:])
        median_ms = in_database[len(in_database) // 2]
        out(
            f"  fast lane tick ({repeats} runs): database time median {median_ms:.1f} ms, max "
            f"{in_database[-1]:.1f} ms; wall time in this process median "
            f"{wall[len(wall) // 2]:.1f} ms (the database's now, a claim-latency sample, every "
            f"probe); it found {tick.announcements.detected} jobs to announce again, targets "
            f"{tick.retries}"
        )
        return median_ms
    finally:
        engine.dispose()
