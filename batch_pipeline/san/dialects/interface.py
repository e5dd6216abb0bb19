"""What a dialect module must provide: the one interface the enqueue path, the rules, the checks
and the commands call, through `dialect(bind)` (as River declares its driver interface and runs
one test suite against every driver: batch_pipeline_tests/san/dialects/test_interface.py).

Every member is required. Three capabilities are optional, and the caller learns whether a
dialect has them from the answer of a function every dialect provides:

- `fused_enqueue(conn, source)`: the whole batch as one statement, or None (the caller then
  takes the portable path: the source's statement, one count query and one insert);
- `announce_statement(channel)`: a statement that announces jobs inside their transaction
  (pg_notify), or None (the database cannot: pg_notify is refused for it);
- `read_load(engine)`: the throttle's signals, or None (the throttle keeps the batch-time
  rule).
"""

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import Column, Table
from sqlalchemy.engine import Connection, Engine, Result
from sqlalchemy.engine.url import URL
from sqlalchemy.sql import Executable
from sqlalchemy.sql.elements import ColumnElement

from batch_pipeline.san.indexes import RecommendedIndex
from batch_pipeline.san.job_source import JobSource
from batch_pipeline.san.limits import WriteLimits
from batch_pipeline.san.throttle import Signals

# The fused enqueue statement, run: (conn, source, *, now, max_attempts, notify_channel) -> its
# outcome, each array by name (see postgresql.enqueue_fused).
FusedEnqueue = Callable[..., dict]


class Dialect(Protocol):
    """The functions (and two constants) of postgresql.py and sqlite.py."""

    NAME: str  # SQLAlchemy's dialect name
    URL_BACKENDS: tuple[str, ...]  # the URL schemes that name this database
    DEFAULT_DISPATCHER: str  # SAN_JOB_DISPATCHER when unset

    # -- connecting ---------------------------------------------------------------------------
    def normalise_url(self, url: URL) -> URL:
        """The URL with the driver batch_pipeline uses."""

    def create_engine(self, url: URL) -> Engine:
        """An engine for the SAN database at `url` (not connected yet)."""

    # -- transactions -------------------------------------------------------------------------
    def transaction_settings(self, conn: Connection, limits: WriteLimits) -> None:
        """Bound the transaction's waits, and set every session setting the code reads values
        with, for this transaction only."""

    def take_write_lock(self, conn: Connection, limits: WriteLimits) -> None:
        """Serialise batch_pipeline's own writers (never SAN's workers)."""

    def database_now(self, conn: Connection) -> datetime:
        """The database's clock, aware."""

    def session_defaults(self, conn: Connection) -> Mapping[str, str]:
        """The session settings the database hands a new connection, by name (for `doctor`)."""

    def avoid_full_scans(self, conn: Connection, index_names: Sequence[str]) -> None:
        """Keep the planner off full scans for the rest of the transaction, where these indexes
        are all valid (a no-op where the planner has no such setting)."""

    # -- the catalog --------------------------------------------------------------------------
    def missing_valid_indexes(self, conn: Connection, index_names: Sequence[str]) -> list[str]:
        """Which of these indexes are absent or unusable."""

    def invalid_indexes(self, conn: Connection, index_names: Sequence[str]) -> list[str]:
        """Which of these indexes exist but are unusable (an interrupted build)."""

    def index_definition_problems(
        self, conn: Connection, indexes: Sequence[RecommendedIndex]
    ) -> dict[str, str]:
        """Of these indexes, those present by name with another definition: name -> what it is."""

    def index_build_lock(self, engine: Engine) -> AbstractContextManager[None]:
        """Held while create-indexes reads the catalog, builds and drops (runs take turns)."""

    def create_index_statement(self, index: RecommendedIndex) -> str:
        """The idempotent DDL of a recommended index."""

    def drop_index_statement(self, name: str) -> str:
        """The idempotent DDL that drops an index."""

    def run_index_statements(self, engine: Engine, statements: Sequence[str]) -> None:
        """Run index DDL the way this database builds indexes without blocking the app."""

    def table_bytes(self, conn: Connection, table_names: Sequence[str]) -> int:
        """The tables' size on disk, together, from the catalog (no table is read)."""

    def column_type_problem(self, declared: Column, found: Any) -> str | None:
        """What is wrong with a column's reflected type for batch_pipeline, or None."""

    def missing_privileges(
        self, conn: Connection, required: Sequence[tuple[str, str]]
    ) -> list[str]:
        """Of the (table, privilege) pairs, those this role lacks, in words."""

    # -- reading ------------------------------------------------------------------------------
    def plain_rows(self, result: Result) -> list[tuple]:
        """Every row of `result` as a plain tuple, in one fetch."""

    # -- expressions --------------------------------------------------------------------------
    def id_in(self, column: ColumnElement, ids: Sequence[int]) -> ColumnElement:
        """`column IN ids`, in the form this database plans and parses best."""

    def minutes_since(self, instant: datetime, column: ColumnElement) -> ColumnElement:
        """Whole minutes from `column` to `instant`."""

    # -- writing ------------------------------------------------------------------------------
    def insert_rows(
        self,
        conn: Connection,
        table: Table,
        constants: Mapping[str, object],
        id_columns: Mapping[str, Sequence[int | None]],
        returning: Sequence[str],
        referenced: Mapping[str, Column] | None = None,
    ) -> list[dict]:
        """One row per position of the `id_columns` lists; the `returning` columns by name."""

    # -- optional capabilities: None where the dialect has none -------------------------------
    def fused_enqueue(self, conn: Connection, source: JobSource) -> FusedEnqueue | None:
        """The one-statement enqueue of this source on this connection, or None."""

    def announce_statement(self, channel: str) -> Executable | None:
        """A statement announcing the jobs bound as `job_ids` inside their transaction, or
        None."""

    def read_load(self, engine: Engine) -> Signals | None:
        """The throttle's signals now (san/throttle.py), or None where there are none."""
