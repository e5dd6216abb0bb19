"""PostgreSQL: every statement and setting only PostgreSQL has.

- array binds: a batch of ids is one bigint[] parameter (`= ANY(:ids)`, `unnest(:a, :b)`), not
  thousands of placeholders the driver would build and parse;
- the fused enqueue statement: with ix_san_jobs_target, the source of a batch (the ghosts it
  closes, the summaries it creates, or a list of targets), the attempt and active counts, the
  insert and the pg_notify of the new jobs are one statement, its outcome a few arrays;
- transaction-local settings, set at the start of every transaction whatever the entry point
  (the engine's `begin` event): bounded lock and statement waits, no JIT, and every setting the
  code reads values with (DateStyle, IntervalStyle, TimeZone, extra_float_digits), so a role's
  or a database's own defaults cannot change what a value means; planner preferences;
- the advisory lock that serialises batch_pipeline's own writers.

Numbers behind these choices: docs/benchmarks.md, "Figures behind the code".

A package by concern: session.py (engine, transaction settings, the write lock), catalog.py
(indexes, sizes, types, privileges), rows.py (arrays, expressions, inserts, row decoding),
enqueue.py (the fused enqueue) and load.py (the throttle's signals). This package is the
dialect (interface.py): it names them all.
"""

from batch_pipeline.san.dialects.postgresql.catalog import (
    avoid_full_scans,
    column_type_problem,
    create_index_statement,
    drop_index_statement,
    has_target_index,
    has_unique_job_index,
    index_build_lock,
    index_definition_problems,
    invalid_indexes,
    missing_privileges,
    missing_valid_indexes,
    run_index_statements,
    table_bytes,
)
from batch_pipeline.san.dialects.postgresql.enqueue import (
    enqueue_fused,
    enqueue_statement,
    fused_enqueue,
)
from batch_pipeline.san.dialects.postgresql.load import read_load
from batch_pipeline.san.dialects.postgresql.rows import (
    BigIntArray,
    announce_statement,
    id_in,
    insert_rows,
    minutes_since,
    plain_rows,
)
from batch_pipeline.san.dialects.postgresql.session import (
    BEGIN_SETTINGS,
    WRITE_LOCK_KEY,
    create_engine,
    database_now,
    normalise_url,
    session_defaults,
    take_write_lock,
    transaction_settings,
)

NAME = "postgresql"
URL_BACKENDS = ("postgresql", "postgres")  # postgres://: the name many hosted databases hand out
DEFAULT_DISPATCHER = "pg_notify"

__all__ = [
    "BEGIN_SETTINGS",
    "DEFAULT_DISPATCHER",
    "NAME",
    "URL_BACKENDS",
    "WRITE_LOCK_KEY",
    "BigIntArray",
    "announce_statement",
    "column_type_problem",
    "create_engine",
    "create_index_statement",
    "database_now",
    "drop_index_statement",
    "enqueue_fused",
    "enqueue_statement",
    "fused_enqueue",
    "has_target_index",
    "has_unique_job_index",
    "id_in",
    "index_build_lock",
    "index_definition_problems",
    "insert_rows",
    "invalid_indexes",
    "minutes_since",
    "missing_privileges",
    "missing_valid_indexes",
    "normalise_url",
    "plain_rows",
    "read_load",
    "avoid_full_scans",
    "run_index_statements",
    "session_defaults",
    "table_bytes",
    "take_write_lock",
    "transaction_settings",
]
