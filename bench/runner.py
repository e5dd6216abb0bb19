"""The benchmark's orchestration: templates, restores, timed runs, plans, figures."""

import argparse
import resource
import signal
import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import psycopg
from dagster import AssetKey, DagsterInstance
from psycopg.sql import SQL, Identifier, Literal
from sqlalchemy import select
from sqlalchemy.engine import make_url

from batch_pipeline.definitions import defs
from batch_pipeline.recovery.assets import recovery_run_config
from batch_pipeline.recovery.checks import UNKNOWN_STATUSES
from batch_pipeline.recovery.ghost_closing import ghost_source
from batch_pipeline.recovery.ghost_jobs import (
    GHOST_DETECTION_PREFERS,
    STALE_PENDING_AFTER,
    STALE_PROCESSING_AFTER,
    GhostRule,
    attempts_query,
    stale_jobs_query,
)
from batch_pipeline.recovery.orphan_scraps import ORPHAN_SCRAPS
from batch_pipeline.recovery.plan import MAX_ATTEMPTS
from batch_pipeline.recovery.registry import RECOVERIES
from batch_pipeline.recovery.targets import ORPHAN_MIN_AGE, TargetRecovery, detect_query
from batch_pipeline.san.config import MAX_JOBS_PER_RUN
from batch_pipeline.san.database import create_san_engine
from batch_pipeline.san.dialects.postgresql import enqueue_statement
from batch_pipeline.san.dialects.postgresql.catalog import SEQSCAN_OFF_IF_INDEXES_VALID
from batch_pipeline.san.dispatch import PG_NOTIFY_CHANNEL
from batch_pipeline.san.resources import JobDispatcherResource, SanDatabase
from batch_pipeline.san.schema import create_recommended_indexes
from batch_pipeline.san.sweep import MAX_CHUNK_IDS, MAX_CHUNK_KEYS
from batch_pipeline.til.assets import til_run_config
from batch_pipeline.til.auto_generation import day_bounds, scraps_of_day_query
from bench import baseline
from bench.probe import probe_figures
from bench.seed import APP_DDL, Scale, seed

DEFAULT_SERVER_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
DEFAULT_PREFIX = "san_bench"  # databases {prefix}_template_noidx, _template_idx, _run, _empty
ZONE = "Asia/Seoul"
AREAS = [recovery.area for recovery in RECOVERIES]
TARGET_RECOVERIES = [recovery for recovery in RECOVERIES if isinstance(recovery, TargetRecovery)]
# Per-run caps lifted for the measurement; the rules are the design's defaults.
LIFTED = {"max_enqueue_per_run": MAX_JOBS_PER_RUN}
# The work itself, against the baseline's SQL: 5,000-row batches without the pauses between
# them that leave the app its latency (san/limits.py, the defaults; bench/app_latency.py
# measures those), as every earlier figure of this benchmark was taken. The TIL too.
WRITES_BACK_TO_BACK = {"batch_size": 5_000, "batch_pause_ratio": 0}


def median(values):
    return statistics.median(values) if values else float("nan")


def db_url(server_url: str, database: str) -> str:
    return make_url(server_url).set(database=database).render_as_string(hide_password=False)


def psycopg_conninfo(url: str) -> dict:
    parsed = make_url(url)
    return {
        k: v
        for k, v in {
            "host": parsed.host,
            "port": parsed.port,
            "user": parsed.username,
            "password": parsed.password,
            "dbname": parsed.database,
        }.items()
        if v is not None
    }


# what a latency figure depends on beside the run (Server.settings_line)
LATENCY_SETTINGS = ("autovacuum", "shared_buffers", "max_wal_size", "checkpoint_timeout")
AS_SET = "as-set"  # --autovacuum: the server's own setting
# a setting's value in postgresql.auto.conf (ALTER SYSTEM's file), to put back after the bench
SET_BY_ALTER_SYSTEM = (
    "SELECT setting FROM pg_file_settings WHERE name = %s "
    "AND sourcefile LIKE '%%postgresql.auto.conf' ORDER BY seqno DESC LIMIT 1"
)
RELOADED_WITHIN_S = 10.0


class Server:
    """Admin connection to the PostgreSQL server: create, copy and drop the bench databases."""

    def __init__(self, url: str, prefix: str = DEFAULT_PREFIX):
        self.url = url
        self.conn = psycopg.connect(**psycopg_conninfo(url), autocommit=True)
        self.run_db, self.empty_db = f"{prefix}_run", f"{prefix}_empty"
        self.templates = {mode: f"{prefix}_template_{mode}" for mode in ("noidx", "idx")}

    def exists(self, name: str) -> bool:
        return bool(
            self.conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        )

    def drop(self, name: str) -> None:
        self.conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def create(self, name: str, template: str | None = None) -> float:
        started = time.perf_counter()
        self.drop(name)
        if template:  # a copy needs the template to itself (e.g. a killed earlier run's backend)
            self.conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid "
                "<> pg_backend_pid()",
                (template,),
            )
        copy = f" TEMPLATE {template}" if template else ""
        if template and self.conn.info.server_version >= 150000:
            # file by file, not through shared buffers and the WAL (PostgreSQL 15's default
            # writes the whole copy to the WAL: gigabytes at scale 1, which the server then
            # writes out, recycles and deletes while the next measurement runs)
            copy += " STRATEGY FILE_COPY"
        self.conn.execute(f"CREATE DATABASE {name}{copy}")
        if template:
            self.checkpoint()
        return time.perf_counter() - started

    def checkpoint(self) -> None:
        """Write out every dirty page, the copy's among them, so that the next statements
        (whichever side is timed first) do not have to. Needs superuser or pg_checkpoint;
        without it the figures are only noisier."""
        try:
            self.conn.execute("CHECKPOINT")
        except psycopg.errors.InsufficientPrivilege:
            pass

    def connect(self, name: str) -> psycopg.Connection:
        return psycopg.connect(**{**psycopg_conninfo(self.url), "dbname": name}, autocommit=True)

    def shown(self, name: str) -> str:
        """A server setting as a new session sees it (a reload reaches this one only later)."""
        with psycopg.connect(**psycopg_conninfo(self.url), autocommit=True) as conn:
            return conn.execute(SQL("SHOW {}").format(Identifier(name))).fetchone()[0]

    @contextmanager
    def autovacuum(self, wanted: str = AS_SET) -> Iterator[None]:
        """The block with autovacuum as `wanted`: AS_SET leaves the server's; "on" switches off
        one on (ALTER SYSTEM and a reload: superuser), and afterwards puts back what
        postgresql.auto.conf held, whatever happened meanwhile. A test server's off would let the
        app's dead rows pile up in its tables and indexes for the whole bench."""
        if wanted == AS_SET or self.shown("autovacuum") == wanted:
            yield
            return
        held = self.conn.execute(SET_BY_ALTER_SYSTEM, ("autovacuum",)).fetchone()
        self._alter_system("autovacuum", wanted)
        try:
            with terminated_as_exit():
                yield
        finally:
            self._alter_system("autovacuum", held[0] if held else None)

    def _alter_system(self, name: str, value: str | None) -> None:
        """ALTER SYSTEM SET `name` to `value` (None: RESET), reloaded, and seen by new sessions."""
        if value is None:
            self.conn.execute(SQL("ALTER SYSTEM RESET {}").format(Identifier(name)))
        else:
            self.conn.execute(
                SQL("ALTER SYSTEM SET {} = {}").format(Identifier(name), Literal(value))
            )
        self.conn.execute("SELECT pg_reload_conf()")
        deadline = time.monotonic() + RELOADED_WITHIN_S
        while value is not None and self.shown(name) != value and time.monotonic() < deadline:
            time.sleep(0.1)

    def settings_line(self) -> str:
        """The server settings a latency figure depends on, as one line; autovacuum off (a test
        server's) is called out: the app's dead rows then pile up in its indexes for the whole
        bench, which no production database lets happen."""
        shown = {name: self.shown(name) for name in LATENCY_SETTINGS}
        line = "# server: " + ", ".join(f"{name} {value}" for name, value in shown.items())
        if shown["autovacuum"] != "on":
            line += " (the app's dead rows are never vacuumed here, unlike in production)"
        return line


@contextmanager
def terminated_as_exit() -> Iterator[None]:
    """SIGTERM (`kill`, the usual way to stop a bench that has gone on too long) raises
    SystemExit inside the block, so the `finally` blocks that put the server back run; Python's
    default would end the process without them."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def exit_on_term(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, exit_on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@dataclass
class Figures:
    """Every timing, keyed by (index mode, measurement)."""

    times: dict = field(default_factory=lambda: defaultdict(list))
    rows: dict = field(default_factory=dict)
    op_times: dict = field(default_factory=lambda: defaultdict(list))
    overhead: dict = field(default_factory=dict)
    write_cost: dict = field(default_factory=dict)
    rss_mb: int = 0
    probe_ms: float = 0.0  # one fast-lane tick's probe, with the indexes

    def ratio(self, job: str) -> float:
        pipeline = median(self.times[("idx", f"pipeline {job}")]) - self.overhead[job]
        return pipeline / median(self.times[("idx", f"baseline {job}")])

    def summary_line(self) -> str:
        if not self.times:  # --probe-only
            return f"probe_ms={self.probe_ms:.1f}"
        return (
            f"ratio recovery={self.ratio('recovery'):.2f} til={self.ratio('til'):.2f} "
            f"overhead_s={max(self.overhead.values()):.1f} rss_mb={self.rss_mb} "
            f"probe_ms={self.probe_ms:.1f}"
        )


def step_spans(
    instance, run_id: str, ended: tuple[str, ...] = ("STEP_SUCCESS",)
) -> list[tuple[str, float, float]]:
    """(op, started, ended) of each step that ended with one of `ended`, from the STEP_START
    and end entries Dagster recorded (epoch seconds)."""
    starts, spans = {}, []
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is None:
            continue
        if event.event_type_value == "STEP_START":
            starts[event.step_key] = entry.timestamp
        elif event.event_type_value in ended:
            # by op name: recovery_job's steps are ops of the run_recovery graph ("run_recovery.x")
            op = event.step_key.rsplit(".", 1)[-1]
            spans.append((op, starts[event.step_key], entry.timestamp))
    return spans


def step_durations(instance, result) -> dict[str, float]:
    """Per-op seconds of the steps that succeeded."""
    return {op: end - start for op, start, end in step_spans(instance, result.run_id)}


def run_pipeline(job_name: str, url: str, config: dict, partition_key: str | None = None):
    """One run through Dagster, timed from launch to finish; returns (seconds, result, instance)."""
    instance = DagsterInstance.ephemeral()
    started = time.perf_counter()
    job_config = (
        recovery_run_config(config) if job_name == "recovery_job" else til_run_config(config)
    )
    result = defs.resolve_job_def(job_name).execute_in_process(
        run_config={**job_config, "loggers": {"console": {"config": {"log_level": "WARNING"}}}},
        resources={"san_database": SanDatabase(url=url), "job_dispatcher": JobDispatcherResource()},
        instance=instance,
        partition_key=partition_key,
    )
    elapsed = time.perf_counter() - started
    return elapsed, result, instance


def materialized(instance, area: str) -> dict:
    event = instance.get_latest_materialization_event(AssetKey(area))
    return {k: v.value for k, v in event.asset_materialization.metadata.items()}


def plan_shape(conn: psycopg.Connection, sql: str, params: dict) -> str:
    """The plan's scan nodes, e.g. 'Index Only Scan jobs(ix_san_jobs_target), Seq Scan scraps'."""
    [[plan]] = conn.execute("EXPLAIN (FORMAT JSON) " + sql, params).fetchone()
    scans = []

    def walk(node):
        kind = node["Node Type"]
        if "Scan" in kind and "Relation Name" in node:
            index = f"({node['Index Name']})" if "Index Name" in node else ""
            scans.append(f"{kind} {node['Relation Name']}{index}")
        elif kind == "Bitmap Index Scan":  # the index under a Bitmap Heap Scan
            scans.append(f"{kind}({node['Index Name']})")
        for child in node.get("Plans", []):
            walk(child)

    walk(plan["Plan"])
    return ", ".join(scans)


# The detections that set enable_seqscan themselves (when their indexes exist), as the pipeline
# does (avoid_full_scans): the indexes each one needs valid.
PLANNER_SETTINGS = {
    "ghost_jobs detection": GHOST_DETECTION_PREFERS,
    "ghost_jobs detection, a chunk's attempts": GHOST_DETECTION_PREFERS,
    **{
        f"{r.name} detection": r.full_sweep_prefers
        for r in TARGET_RECOVERIES
        if r.full_sweep_prefers
    },
}
SEQSCAN_OFF = SEQSCAN_OFF_IF_INDEXES_VALID.text.replace(":names", "%(names)s")


def detection_queries(now: datetime, day: date):
    engine = create_san_engine(DEFAULT_SERVER_URL)  # only its dialect, to compile; never connects
    start, end = day_bounds(day, ZONE)
    queries = {
        "ghost_jobs detection": stale_jobs_query(GhostRule(now=now)),
        "ghost_jobs detection, a chunk's attempts": attempts_query(
            engine,
            range(11, 100 * MAX_CHUNK_KEYS, 100),  # the seed's ghosts: id % 100 = 11
        ),
        **{
            f"{r.name} detection": detect_query(r, created_before=now - ORPHAN_MIN_AGE)
            for r in TARGET_RECOVERIES
        },
        "orphan_scraps detection, 48 h look-back": detect_query(
            ORPHAN_SCRAPS,
            created_before=now - ORPHAN_MIN_AGE,
            created_since=now - timedelta(hours=48),
        ),
        "TIL day's scraps, a chunk": scraps_of_day_query((start, 0), end, MAX_CHUNK_IDS),
        "unknown_job_statuses check": UNKNOWN_STATUSES,
    }
    for name, query in queries.items():
        compiled = query.compile(
            dialect=engine.dialect, compile_kwargs={"render_postcompile": True}
        )
        yield name, str(compiled), compiled.params


# A sample batch per write statement, for its plan: the write ops' probes must stay per-target
# index lookups (a join the planner turns into a hash over a whole table grows with the table).
SAMPLE_BATCH = 5_000
GHOST_SAMPLE = (
    "SELECT id FROM jobs WHERE status IN ('PENDING', 'PROCESSING') AND created_at < %(cutoff)s "
    f"ORDER BY created_at LIMIT {SAMPLE_BATCH}"
)


def sample_ids(conn: psycopg.Connection, engine, recovery, now: datetime) -> list[int]:
    """A batch of ids the recovery would write for: stale jobs, or targets that need work."""
    if not isinstance(recovery, TargetRecovery):
        return [row[0] for row in conn.execute(GHOST_SAMPLE, {"cutoff": now - STALE_PENDING_AFTER})]
    compiled = (
        select(recovery.table.c.id)
        .where(recovery.needs_work)
        .limit(SAMPLE_BATCH)
        .compile(dialect=engine.dialect, compile_kwargs={"literal_binds": True})
    )
    return [row[0] for row in conn.execute(str(compiled))]


def write_batch_queries(conn: psycopg.Connection, url: str, now: datetime):
    """The write statements of one 5,000-row batch per recovery, on PostgreSQL with
    ix_san_jobs_target (compiled only: EXPLAIN without ANALYZE writes nothing)."""
    engine = create_san_engine(url)
    try:
        with engine.connect() as sa_conn:
            statements = {}
            for recovery in RECOVERIES:
                ids = sample_ids(conn, engine, recovery, now)
                name = f"{recovery.name} write batch"
                # the sources the pipeline's write batches build, in the statement they run
                source = (
                    recovery.job_source(ids)
                    if isinstance(recovery, TargetRecovery)
                    else ghost_source(sa_conn, ids, GhostRule(now=now))
                )
                statements[name] = enqueue_statement(source, now, MAX_ATTEMPTS, PG_NOTIFY_CHANNEL)
            for name, statement in statements.items():
                compiled = statement.compile(
                    dialect=engine.dialect, compile_kwargs={"render_postcompile": True}
                )
                yield name, str(compiled), compiled.construct_params()
    finally:
        engine.dispose()


def run_benchmark(
    scale_factor: float,
    server_url: str,
    repeats: int = 3,
    keep: bool = False,
    out: Callable[[str], None] = print,
    prefix: str = DEFAULT_PREFIX,
    only_indexed: bool = False,
    probe_only: bool = False,
    paced: bool = False,
) -> Figures:
    """`only_indexed`: seed straight into the indexed template and skip the no-index runs, so
    two copies of the database exist at once instead of three (scale 10 on a small disk).
    `paced`: the pipeline writes with its default batches and rests, what a production run
    takes, instead of back to back."""
    writes = {} if paced else WRITES_BACK_TO_BACK
    scale = Scale(scale_factor)
    server = Server(server_url, prefix)
    figures = Figures()
    now = datetime.now(UTC)
    til_day = (now.astimezone(ZoneInfo(ZONE)) - timedelta(days=1)).date()
    out(
        f"# batch_pipeline benchmark, scale {scale_factor}: {scale.users:,} users, "
        f"{scale.scraps:,} scraps, "
        f"TIL day {til_day}, {repeats} repeats"
        + (", the pipeline's writes paced by its defaults" if paced else "")
    )

    # Seed once, then two templates: the app's DDL as it is, and with the recommended indexes.
    only_indexed = only_indexed or probe_only
    modes = ("idx",) if only_indexed else ("noidx", "idx")
    started = time.perf_counter()
    server.create(server.templates[modes[0]])
    with server.connect(server.templates[modes[0]]) as conn:
        seed(conn, scale, now)
        counts = {
            t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in ("scraps", "jobs", "daily_summaries")
        }
    out(
        f"seeded in {time.perf_counter() - started:.1f} s: "
        + ", ".join(f"{t} {n:,}" for t, n in counts.items())
    )
    if not only_indexed:
        server.create(server.templates["idx"], template=server.templates["noidx"])
    started = time.perf_counter()
    index_engine = create_san_engine(db_url(server_url, server.templates["idx"]))
    create_recommended_indexes(index_engine)
    index_engine.dispose()
    with server.connect(server.templates["idx"]) as conn:
        conn.execute("VACUUM ANALYZE")
        sizes = conn.execute(
            "SELECT relname, pg_size_pretty(pg_relation_size(oid)) FROM pg_class WHERE relname "
            "LIKE 'ix_san_%' ORDER BY 1"
        ).fetchall()
    out(
        f"recommended indexes built in {time.perf_counter() - started:.1f} s: "
        + ", ".join(f"{n} {s}" for n, s in sizes)
    )

    # Dagster's fixed cost: the same jobs on an empty SAN database.
    server.create(server.empty_db)
    with server.connect(server.empty_db) as conn:
        conn.execute(APP_DDL.read_text())
    empty_url = db_url(server_url, server.empty_db)
    # One run of each first, not counted: the first run in a process imports and compiles what
    # every later run reuses, which is no fixed cost of a run (with --repeats 1 it was taken
    # for one, and flattered the ratios).
    run_pipeline("recovery_job", empty_url, {})
    run_pipeline("til_auto_generation_job", empty_url, {}, partition_key=str(til_day))
    figures.overhead["recovery"] = median(
        [run_pipeline("recovery_job", empty_url, {})[0] for _ in range(repeats)]
    )
    figures.overhead["til"] = median(
        [
            run_pipeline("til_auto_generation_job", empty_url, {}, partition_key=str(til_day))[0]
            for _ in range(repeats)
        ]
    )
    out(
        f"fixed Dagster overhead (empty database): recovery_job {figures.overhead['recovery']:.2f} "
        "s, "
        f"til_auto_generation_job {figures.overhead['til']:.2f} s"
    )

    run_url = db_url(server_url, server.run_db)
    restores = []
    for mode in modes:
        template = server.templates[mode]
        restores.append(server.create(server.run_db, template=template))
        out(f"\n## {'with' if mode == 'idx' else 'without'} the recommended indexes: plan shapes")
        with server.connect(server.run_db) as conn:
            for name, sql, params in detection_queries(now, til_day):
                with conn.transaction():  # the pipeline's own planner settings for its detections
                    if name in PLANNER_SETTINGS:
                        conn.execute(SEQSCAN_OFF, {"names": list(PLANNER_SETTINGS[name])})
                    out(f"  {name:34s} {plan_shape(conn, sql, params)}")
            if mode == "idx":
                for name, sql, params in write_batch_queries(conn, run_url, now):
                    out(f"  {name:34s} {plan_shape(conn, sql, params)}")
                figures.probe_ms = probe_figures(conn, run_url, now, plan_shape, out)
        if probe_only:
            continue
        cost = app_write_cost(server, template)
        figures.write_cost[mode] = cost
        out(
            f"  app job updates: {cost['updates']:,} single-row worker updates, "
            f"{cost['ms_per_update']:.3f} ms each, "
            f"{100 * cost['hot_share']:.0f} % HOT"
        )
        for _ in range(repeats):
            _baseline_recovery(server, template, figures, mode, now, restores)
            _pipeline_recovery(server, template, run_url, figures, mode, restores, writes)
            _baseline_til(server, template, figures, mode, now, til_day, restores)
            _pipeline_til(server, template, run_url, figures, mode, til_day, restores, writes)
        _print_mode(figures, mode, out)

    figures.rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    out(
        f"\nrestore of a template copy: median {median(restores):.2f} s (not counted in any figure)"
    )
    out(f"peak RSS of this process (seeding is in PostgreSQL): {figures.rss_mb} MB")
    out("rows changed (with indexes): " + ", ".join(f"{k} {v:,}" for k, v in figures.rows.items()))
    if not keep:
        for name in (
            server.run_db,
            server.empty_db,
            server.templates["idx"],
            server.templates["noidx"],
        ):
            server.drop(name)
    server.conn.close()
    return figures


APP_UPDATES = 5_000


def app_write_cost(server: Server, template: str) -> dict:
    """What the indexes cost the SAN application: its workers' own job updates.

    Replays APP_UPDATES worker transitions (PENDING -> PROCESSING, PROCESSING -> COMPLETED), one
    transaction each as a worker does, and reads how many were HOT (heap-only: no index touched).
    A partial index whose predicate names `status` makes every status change non-HOT.
    """
    server.create(server.run_db, template=template)
    with server.connect(server.run_db) as conn:
        ids = [
            row[0]
            for row in conn.execute(
                "SELECT id FROM jobs WHERE status IN ('PENDING', 'PROCESSING') "
                "ORDER BY id LIMIT %s",
                (APP_UPDATES,),
            )
        ]
        conn.execute("SELECT pg_stat_reset_single_table_counters('jobs'::regclass)")
        started = time.perf_counter()
        for job_id in ids:
            conn.execute(
                "UPDATE jobs SET status = CASE status WHEN 'PENDING' THEN 'PROCESSING' ELSE "
                "'COMPLETED' END, "
                "updated_at = now(), started_at = coalesce(started_at, now()) WHERE id = %s",
                (job_id,),
            )
        elapsed = time.perf_counter() - started
        conn.execute("SELECT pg_stat_force_next_flush()")
        time.sleep(0.5)
        updates, hot = conn.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'jobs'"
        ).fetchone()
    return {
        "updates": len(ids),
        "ms_per_update": 1000 * elapsed / max(len(ids), 1),
        "hot_share": hot / max(updates, 1),
    }


def _baseline_recovery(server, template, figures, mode, now, restores):
    restores.append(server.create(server.run_db, template=template))
    params = {
        "now": now,
        "pending_cutoff": now - STALE_PENDING_AFTER,
        "processing_cutoff": now - STALE_PROCESSING_AFTER,
        "grace_cutoff": now - ORPHAN_MIN_AGE,
        "max_attempts": MAX_ATTEMPTS,
    }
    total = 0.0
    with server.connect(server.run_db) as conn:
        for area in AREAS:  # in the registry's order, as recovery_job runs them
            sql, extra = baseline.RECOVERY_SQL[area]
            started = time.perf_counter()
            rows = conn.execute(sql, {**params, **extra}).fetchone()[0]
            elapsed = time.perf_counter() - started
            total += elapsed
            figures.times[(mode, f"baseline {area}")].append(elapsed)
            if mode == "idx":
                figures.rows[f"baseline {area}"] = rows
    figures.times[(mode, "baseline recovery")].append(total)


def _pipeline_recovery(server, template, run_url, figures, mode, restores, writes):
    restores.append(server.create(server.run_db, template=template))
    elapsed, result, instance = run_pipeline("recovery_job", run_url, {**LIFTED, **writes})
    figures.times[(mode, "pipeline recovery")].append(elapsed)
    steps = step_durations(instance, result)
    for step, seconds in steps.items():
        figures.op_times[(mode, step)].append(seconds)
    for recovery in RECOVERIES:
        area = recovery.area
        figures.times[(mode, f"pipeline {area}")].append(
            steps[f"detect_{recovery.name}"] + steps[f"recover_{recovery.name}"]
        )
        if mode == "idx":
            figures.rows[f"pipeline {area}"] = materialized(instance, area)["enqueued"]
    # Steady state: the same database again, nothing left to recover.
    for label, config in (("steady", {}), ("steady, 48 h look-back", {"scrap_lookback_hours": 48})):
        elapsed, result, instance = run_pipeline(
            "recovery_job", run_url, {**LIFTED, **writes, **config}
        )
        steps = step_durations(instance, result)
        figures.times[(mode, f"{label} run")].append(elapsed)
        figures.times[(mode, f"{label} database")].append(
            sum(v for k, v in steps.items() if k.startswith("detect_"))
        )


def _baseline_til(server, template, figures, mode, now, day, restores):
    restores.append(server.create(server.run_db, template=template))
    start, end = day_bounds(day, ZONE)
    with server.connect(server.run_db) as conn:
        started = time.perf_counter()
        rows = conn.execute(
            baseline.TIL_GENERATION, {"day_start": start, "day_end": end, "day": day, "now": now}
        ).fetchone()[0]
        figures.times[(mode, "baseline til")].append(time.perf_counter() - started)
    if mode == "idx":
        figures.rows["baseline til jobs"] = rows


def _pipeline_til(server, template, run_url, figures, mode, day, restores, writes):
    restores.append(server.create(server.run_db, template=template))
    elapsed, result, instance = run_pipeline(
        "til_auto_generation_job", run_url, writes, partition_key=str(day)
    )
    figures.times[(mode, "pipeline til")].append(elapsed)
    for step, seconds in step_durations(instance, result).items():
        figures.op_times[(mode, step)].append(seconds)
    if mode == "idx":
        figures.rows["pipeline til jobs"] = materialized(instance, "til_auto_generation")[
            "jobs_created"
        ]


def _print_mode(figures, mode, out):
    t = figures.times
    out(f"\n  {'measurement':34s} {'baseline s':>11s} {'pipeline s':>11s} {'ratio':>7s}")
    for area in AREAS:
        b, p = median(t[(mode, f"baseline {area}")]), median(t[(mode, f"pipeline {area}")])
        out(f"  {area:34s} {b:11.3f} {p:11.3f} {p / b:7.2f}")
    for job in ("recovery", "til"):
        b, p = median(t[(mode, f"baseline {job}")]), median(t[(mode, f"pipeline {job}")])
        net = p - figures.overhead[job]
        out(
            f"  {job + ' (whole run, minus overhead)':34s} {b:11.3f} {net:11.3f} {net / b:7.2f}   "
            f"(run {p:.3f} s)"
        )
    for label in ("steady", "steady, 48 h look-back"):
        out(
            f"  {'recovery ' + label + ' state':34s} run {median(t[(mode, label + ' run')]):.3f} "
            "s, "
            f"detection (database) {median(t[(mode, label + ' database')]):.3f} s"
        )
    out(
        "  per-op medians (Dagster step timings): "
        + ", ".join(
            f"{step} {median(v):.3f}" for (m, step), v in figures.op_times.items() if m == mode
        )
    )


def bench_parser(prog: str, doc: str) -> argparse.ArgumentParser:
    """A benchmark's command line: its module's docstring, as written, is its --help."""
    return argparse.ArgumentParser(
        prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
