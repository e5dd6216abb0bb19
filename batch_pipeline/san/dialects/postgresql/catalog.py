"""PostgreSQL's catalog: which indexes exist and are valid (and the planner preference for them),
their DDL, table sizes, column types and the role's privileges."""

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from sqlalchemy import (
    Column,
    DateTime,
    text,
)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError

from batch_pipeline.san.indexes import RecommendedIndex

# -- named statements ----------------------------------------------------------------------
# `:names` (text[]) in their order, those absent or INVALID (what an interrupted CREATE INDEX
# CONCURRENTLY leaves: present in the catalog, never used by the planner).
MISSING_VALID_INDEXES = text(
    "SELECT name FROM unnest(CAST(:names AS text[])) WITH ORDINALITY AS n(name, position) "
    "WHERE NOT EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass(name) "
    "AND indisvalid) ORDER BY position"
)
# `:names` in their order, those present but INVALID.
INVALID_INDEXES = text(
    "SELECT name FROM unnest(CAST(:names AS text[])) WITH ORDINALITY AS n(name, position) "
    "WHERE EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass(name) "
    "AND NOT indisvalid) ORDER BY position"
)
# Sequential scans off for the rest of the transaction, only if every index of `:names` is
# valid (without them it would push the planner to read a whole table through another index).
SEQSCAN_OFF_IF_INDEXES_VALID = text(
    "SELECT set_config('enable_seqscan', 'off', true) WHERE NOT EXISTS ("
    "SELECT 1 FROM unnest(CAST(:names AS text[])) AS name WHERE NOT EXISTS ("
    "SELECT 1 FROM pg_index WHERE indexrelid = to_regclass(name) AND indisvalid))"
)
TABLE_BYTES = text(
    "SELECT coalesce(sum(pg_total_relation_size(to_regclass(name))), 0) "
    "FROM unnest(CAST(:names AS text[])) AS name"
)
HAS_TABLE_PRIVILEGE = text("SELECT has_table_privilege(:table, :action)")
ID_SEQUENCE = text("SELECT pg_get_serial_sequence(:table, 'id')")
HAS_SEQUENCE_USAGE = text("SELECT has_sequence_privilege(:sequence, 'USAGE')")
TARGET_INDEX_IS_VALID = text(
    "SELECT EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass('ix_san_jobs_target') "
    "AND indisvalid)"
)
HAS_UNIQUE_JOB_INDEX = text(
    "SELECT EXISTS (SELECT 1 FROM pg_index WHERE indrelid = to_regclass('jobs') "
    "AND indisunique AND NOT indisprimary)"
)


# An index found by name: whether it is on the expected table, unique, and its definition.
INDEX_FOUND = text(
    "SELECT indrelid = to_regclass(:table) AS on_table, indisunique, "
    "pg_get_indexdef(indexrelid) AS definition FROM pg_index "
    "WHERE indexrelid = to_regclass(:name)"
)
INDEX_DEFINITION = text("SELECT pg_get_indexdef(to_regclass(:name))")
# What the expected definitions are compared on: PostgreSQL's own rendering of a recommended
# index, built on an empty temporary copy of its table inside a savepoint that is rolled back.
PROBE_PREFIX = "san_index_probe_"
# One create-indexes at a time (ASCII "SANINDEX"): a second run waits, then sees the first's work
# (and never drops an index the first is still building as "INVALID").
INDEX_BUILD_LOCK_KEY = 0x53414E494E444558
TRY_INDEX_BUILD_LOCK = text("SELECT pg_try_advisory_lock(:key)")
INDEX_BUILD_LOCK_RETRY_S = 0.5


def index_definition_problems(
    conn: Connection, indexes: Sequence[RecommendedIndex]
) -> dict[str, str]:
    """Of `indexes`, those present by name whose definition is not the recommended one (table,
    columns, INCLUDE, predicate, uniqueness): name -> the definition found. Compared with
    PostgreSQL's rendering of the recommended DDL; where it cannot be rendered (no TEMP
    privilege, a read-only standby) names are trusted."""
    found = {}
    for index in indexes:
        row = conn.execute(INDEX_FOUND, {"name": index.name, "table": index.table}).first()
        if row is not None:
            found[index] = row
    if not found:
        return {}
    expected = rendered_definitions(conn, list(found))
    if expected is None:
        return {}
    return {
        index.name: row.definition
        for index, row in found.items()
        if not row.on_table
        or row.indisunique != index.unique
        or shape(row.definition) != shape(expected[index.name])
    }


def shape(definition: str) -> str:
    """An index definition from its access method on: columns, INCLUDE, predicate."""
    return definition.split(" USING ", 1)[-1]


def rendered_definitions(
    conn: Connection, indexes: Sequence[RecommendedIndex]
) -> dict[str, str] | None:
    """PostgreSQL's definition of each recommended index, by name, or None if it cannot be
    rendered here."""
    savepoint = conn.begin_nested()
    try:
        for table in sorted({index.table for index in indexes}):
            conn.execute(text(f"CREATE TEMP TABLE {PROBE_PREFIX}{table} (LIKE {table})"))
        rendered = {}
        for position, index in enumerate(indexes):
            body = index.postgresql.removeprefix(f"{index.table} ")
            probe = f"{PROBE_PREFIX}{position}"
            unique = "UNIQUE " if index.unique else ""
            conn.execute(
                text(f"CREATE {unique}INDEX {probe} ON {PROBE_PREFIX}{index.table} {body}")
            )
            rendered[index.name] = conn.execute(
                INDEX_DEFINITION, {"name": f"pg_temp.{probe}"}
            ).scalar_one()
        return rendered
    except DBAPIError:
        return None
    finally:
        savepoint.rollback()


@contextmanager
def index_build_lock(engine: Engine) -> Iterator[None]:
    """Held while create-indexes reads the catalog, builds and drops: runs take turns."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        # Tried, not waited for: a session waiting in pg_advisory_lock is a running statement,
        # and the holder's CREATE INDEX CONCURRENTLY would wait for it to end, forever.
        while not conn.execute(TRY_INDEX_BUILD_LOCK, {"key": INDEX_BUILD_LOCK_KEY}).scalar_one():
            time.sleep(INDEX_BUILD_LOCK_RETRY_S)
        try:
            yield
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": INDEX_BUILD_LOCK_KEY})


def avoid_full_scans(conn: Connection, index_names: Sequence[str]) -> None:
    """For detection queries whose index plan the planner prices about even with a full scan at
    SAN's size: no sequential scans for the rest of the transaction, if every one of
    `index_names` is valid."""
    if index_names:
        conn.execute(SEQSCAN_OFF_IF_INDEXES_VALID, {"names": list(index_names)})


def missing_valid_indexes(conn: Connection, index_names: Sequence[str]) -> list[str]:
    """Which of these indexes do not exist or are INVALID, in their order."""
    return list(conn.execute(MISSING_VALID_INDEXES, {"names": list(index_names)}).scalars())


def invalid_indexes(conn: Connection, index_names: Sequence[str]) -> list[str]:
    """Which of these indexes exist but are INVALID, in their order."""
    return list(conn.execute(INVALID_INDEXES, {"names": list(index_names)}).scalars())


def create_index_statement(index: RecommendedIndex) -> str:
    """CONCURRENTLY: the build does not block the app's writes (it must run outside a
    transaction: run_index_statements)."""
    unique = "UNIQUE " if index.unique else ""
    return f"CREATE {unique}INDEX CONCURRENTLY IF NOT EXISTS {index.name} ON {index.postgresql}"


def drop_index_statement(name: str) -> str:
    return f"DROP INDEX CONCURRENTLY IF EXISTS {name}"


def run_index_statements(engine: Engine, statements: Sequence[str]) -> None:
    """Outside a transaction (CONCURRENTLY needs it), with statement_timeout off for this
    session: a role's timeout would cancel the build of a big index half-way and leave it
    INVALID."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("SET statement_timeout = 0"))
        for statement in statements:
            conn.execute(text(statement))


def table_bytes(conn: Connection, table_names: Sequence[str]) -> int:
    """pg_total_relation_size: heap, TOAST and indexes."""
    return conn.execute(TABLE_BYTES, {"names": list(table_names)}).scalar_one()


def column_type_problem(declared: Column, found) -> str | None:
    """A column batch_pipeline reads as an instant (TIMESTAMPTZ) that the database holds as a
    wall-clock time (TIMESTAMP WITHOUT TIME ZONE): every age would be off by an offset."""
    if (
        isinstance(declared.type, DateTime)
        and declared.type.timezone
        and getattr(found, "timezone", True) is False
    ):
        return (
            "is TIMESTAMP WITHOUT TIME ZONE; batch_pipeline needs TIMESTAMPTZ (a naive timestamp "
            "is read in the session's zone, and every age would be off by its offset)"
        )
    return None


def missing_privileges(conn: Connection, required: Sequence[tuple[str, str]]) -> list[str]:
    """Of the (table, privilege) pairs, those this role lacks; and USAGE on the id sequences of
    the tables it inserts into (a SELECT-only role would pass every other check and fail the
    first write)."""
    missing = [
        f"{action} on {table}"
        for table, action in required
        if not conn.execute(HAS_TABLE_PRIVILEGE, {"table": table, "action": action}).scalar_one()
    ]
    for table in sorted({table for table, action in required if action == "INSERT"}):
        sequence = conn.execute(ID_SEQUENCE, {"table": table}).scalar_one()
        if sequence and not conn.execute(HAS_SEQUENCE_USAGE, {"sequence": sequence}).scalar_one():
            missing.append(f"USAGE on sequence {sequence}")
    return missing


def has_target_index(conn: Connection) -> bool:
    """Whether ix_san_jobs_target exists and is valid (cached per database connection). The fused
    statement probes it per target; without it that statement would scan the whole jobs table once
    per batch with no parallel workers (a data-modifying statement gets none), so the portable count
    query + insert is the faster path there."""
    if "batch_pipeline.has_target_index" not in conn.info:
        conn.info["batch_pipeline.has_target_index"] = conn.execute(
            TARGET_INDEX_IS_VALID
        ).scalar_one()
    return conn.info["batch_pipeline.has_target_index"]


def has_unique_job_index(conn: Connection) -> bool:
    """Whether `jobs` has a unique index besides its primary key (SAN's guarantee of one active
    job per target, cached per connection). Only then can a job insert conflict, and only then
    do the inserts pay for ON CONFLICT's speculative insertion."""
    if "batch_pipeline.has_unique_job_index" not in conn.info:
        conn.info["batch_pipeline.has_unique_job_index"] = conn.execute(
            HAS_UNIQUE_JOB_INDEX
        ).scalar_one()
    return conn.info["batch_pipeline.has_unique_job_index"]
