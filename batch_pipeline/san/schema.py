"""The SAN tables batch_pipeline reads and writes, as SQLAlchemy Core.

The SAN application owns these tables. batch_pipeline declares only the columns it uses: a real
SAN database has more columns and other tables, and that is fine. `create_schema` is for empty
databases (the embedded default, demos, tests); `recommended_index_statements` is the separate,
idempotent command for a production database. Nothing here ever alters an app-owned table.
"""

from dataclasses import dataclass

from sqlalchemy import (
    BigInteger,
    Column,
    Date,
    DateTime,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    func,
    inspect,
    select,
    text,
)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.sql.elements import ColumnElement

# BIGINT identity on PostgreSQL; SQLite only auto-increments an INTEGER PRIMARY KEY.
Id = BigInteger().with_variant(Integer(), "sqlite")
Timestamp = DateTime(timezone=True)

metadata = MetaData()

users = Table("users", metadata, Column("id", Id, primary_key=True))

scraps = Table(
    "scraps",
    metadata,
    Column("id", Id, primary_key=True),
    Column("user_id", Id, ForeignKey("users.id"), nullable=False),
    Column("original_content", Text, nullable=False),
    Column("refined_content", Text, nullable=True),
    Column("created_at", Timestamp, nullable=False),
    Column("updated_at", Timestamp, nullable=False),
)

knowledge_cards = Table(
    "knowledge_cards",
    metadata,
    Column("id", Id, primary_key=True),
    Column("scrap_id", Id, ForeignKey("scraps.id"), nullable=False, unique=True),
    Column("user_id", Id, ForeignKey("users.id"), nullable=False),
    Column("created_at", Timestamp, nullable=False),
)

jobs = Table(
    "jobs",
    metadata,
    Column("id", Id, primary_key=True),
    Column("job_type", String(32), nullable=False),
    Column("target_id", Id, nullable=False),
    Column("status", String(16), nullable=False),
    Column("created_at", Timestamp, nullable=False),
    Column("updated_at", Timestamp, nullable=False),
    Column("started_at", Timestamp, nullable=True),
    Column("finished_at", Timestamp, nullable=True),
    Column("error_message", Text, nullable=True),
    Column("retry_of_job_id", Id, ForeignKey("jobs.id"), nullable=True),
)

daily_summaries = Table(
    "daily_summaries",
    metadata,
    Column("id", Id, primary_key=True),
    Column("user_id", Id, ForeignKey("users.id"), nullable=False),
    Column("target_date", Date, nullable=False),
    Column("content", Text, nullable=True),
    Column("created_at", Timestamp, nullable=False),
)

# Job vocabulary of the SAN application.
CARD_ANALYSIS = "CARD_ANALYSIS"
SCRAP_REFINE = "SCRAP_REFINE"
TIL_GENERATION = "TIL_GENERATION"
JOB_TYPES = (CARD_ANALYSIS, SCRAP_REFINE, TIL_GENERATION)

PENDING = "PENDING"
PROCESSING = "PROCESSING"
COMPLETED = "COMPLETED"
FAILED = "FAILED"
ACTIVE_STATUSES = (PENDING, PROCESSING)  # what recovery closes as ghosts (and nothing else)
FINISHED_STATUSES = (COMPLETED, FAILED)
JOB_STATUSES = (PENDING, PROCESSING, COMPLETED, FAILED)


def holds_its_target(status) -> ColumnElement:
    """Whether a job still covers its (job_type, target_id) for the "no active job" tests: every
    status but COMPLETED and FAILED. A status the pipeline does not know (lower-case 'pending',
    a new app state) may be a live job: counting it as active never doubles one. Such jobs are
    still never touched (ghost detection matches PENDING / PROCESSING only); the
    unknown_job_statuses check names them."""
    return status.not_in(FINISHED_STATUSES)


# ---------------------------------------------------------------------------------------------
# Recommended indexes: not part of the app's DDL, applied by `python -m batch_pipeline
# create-indexes`. Each one is justified in docs/benchmarks.md.
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RecommendedIndex:
    name: str
    table: str
    why: str
    postgresql: str  # the body after "ON": columns, INCLUDE and WHERE
    sqlite: str
    unique: bool = False


RECOMMENDED_INDEXES = (
    RecommendedIndex(
        name="ix_san_jobs_target",
        table="jobs",
        why="attempt counts and the 'no active job' check look jobs up by (target_id, job_type)",
        postgresql="jobs (target_id, job_type) INCLUDE (status)",
        sqlite="jobs (target_id, job_type, status)",
    ),
    RecommendedIndex(
        name="ix_san_jobs_active_created",
        table="jobs",
        why="ghost detection reads only the few active jobs, not the whole jobs history",
        postgresql="jobs (created_at) WHERE status IN ('PENDING', 'PROCESSING')",
        sqlite="jobs (created_at) WHERE status IN ('PENDING', 'PROCESSING')",
    ),
    RecommendedIndex(
        name="ix_san_jobs_failed_updated",
        table="jobs",
        why="the fast lane's probe reads only the last hours' failed jobs, not every failure ever",
        postgresql="jobs (updated_at) INCLUDE (job_type, target_id) WHERE status = 'FAILED'",
        sqlite="jobs (updated_at, job_type, target_id) WHERE status = 'FAILED'",
    ),
    RecommendedIndex(
        name="ix_san_scraps_created_at",
        table="scraps",
        why="TIL detection reads one day of scraps by a created_at range",
        postgresql="scraps (created_at)",
        sqlite="scraps (created_at)",
    ),
    RecommendedIndex(
        name="ix_san_scraps_unrefined_by_id",
        table="scraps",
        why="unrefined detection reads only scraps whose refined_content is still NULL, and the "
        "write-time re-check probes it by id, both without reading the scraps themselves",
        postgresql="scraps (id) INCLUDE (created_at, user_id) WHERE refined_content IS NULL",
        sqlite="scraps (id, created_at, user_id) WHERE refined_content IS NULL",
    ),
    RecommendedIndex(
        name="ix_san_jobs_unknown_status",
        table="jobs",
        why="the unknown_job_statuses check, run in every recovery run, reads only jobs whose "
        "status "
        "batch_pipeline does not know (usually none) instead of every job",
        postgresql="jobs (status) WHERE status NOT IN ('PENDING', 'PROCESSING', 'COMPLETED', "
        "'FAILED')",
        sqlite="jobs (status) WHERE status NOT IN ('PENDING', 'PROCESSING', 'COMPLETED', 'FAILED')",
    ),
    RecommendedIndex(
        name="ix_san_daily_summaries_unwritten_by_id",
        table="daily_summaries",
        why="unwritten-TIL detection reads only summaries whose content is still NULL, and the "
        "write-time re-check probes it by id, both without reading the summaries themselves",
        postgresql="daily_summaries (id) INCLUDE (created_at, user_id) WHERE content IS NULL",
        sqlite="daily_summaries (id, created_at, user_id) WHERE content IS NULL",
    ),
)

# The app-side guarantee: at most one active job per (job_type, target_id), whoever inserts
# it. The app's own enqueue does not take batch_pipeline's advisory lock, so without it the
# two can race into two active jobs for one target (River's and Oban's unique jobs do the
# same). batch_pipeline inserts with ON CONFLICT DO NOTHING, so with it a race is a skipped
# row (skipped_by_race), never a failed batch. `create-indexes` does not build it: it changes
# the app's own behaviour (its second enqueue of an active target then fails), so it is SAN's
# team's decision; `show-indexes` and `doctor` offer it, its cost is in docs/benchmarks.md.
APP_ONE_ACTIVE_JOB = RecommendedIndex(
    name="ux_san_jobs_one_active",
    table="jobs",
    why="at most one PENDING/PROCESSING job per (job_type, target_id), whoever enqueues it",
    postgresql="jobs (job_type, target_id) WHERE status IN ('PENDING', 'PROCESSING')",
    sqlite="jobs (job_type, target_id) WHERE status IN ('PENDING', 'PROCESSING')",
    unique=True,
)


def app_guarantee_statement(dialect_name: str) -> str:
    [statement] = recommended_index_statements(dialect_name, [APP_ONE_ACTIVE_JOB])
    return statement


def app_guarantee_index(conn: Connection) -> str | None:
    """The name of a valid unique index on jobs (job_type, target_id), whatever the app calls
    it (partial on the active statuses, or over every row), or None."""
    from batch_pipeline.san.dialects import dialect  # the dialect modules import this one

    names = [
        ix["name"]
        for ix in inspect(conn).get_indexes("jobs")
        if ix.get("unique") and set(ix["column_names"]) == {"job_type", "target_id"}
    ]
    invalid = set(dialect(conn).invalid_indexes(conn, names)) if names else set()
    return next((name for name in names if name not in invalid), None)


def targets_with_two_active_jobs(conn: Connection) -> int:
    """(job_type, target_id) pairs with more than one active job now: the unique index cannot
    be built until they are closed. Reads active jobs only (ix_san_jobs_active_created)."""
    doubled = (
        select(jobs.c.job_type, jobs.c.target_id)
        .where(jobs.c.status.in_(ACTIVE_STATUSES))
        .group_by(jobs.c.job_type, jobs.c.target_id)
        .having(func.count() > 1)
        .subquery()
    )
    return conn.execute(select(func.count()).select_from(doubled)).scalar_one()


# Indexes an earlier release recommended and a newer one replaces: `create-indexes` drops them
# once their replacement exists; `doctor` and the recovery_indexes check point them out.
SUPERSEDED_INDEXES = {
    # keyed by created_at: the re-check could not probe it by id and read every scrap's heap page
    "ix_san_scraps_unrefined": "ix_san_scraps_unrefined_by_id",
}


def recommended_index_statements(dialect_name: str, indexes=RECOMMENDED_INDEXES) -> list[str]:
    """The idempotent DDL for (some of) the recommended indexes on this dialect.

    On PostgreSQL the statements are CONCURRENTLY, so they do not block the app's writes; they
    must run outside a transaction (autocommit).
    """

    def create(index: RecommendedIndex) -> str:
        return f"CREATE {'UNIQUE ' if index.unique else ''}INDEX"

    if dialect_name == "postgresql":
        return [
            f"{create(index)} CONCURRENTLY IF NOT EXISTS {index.name} ON {index.postgresql}"
            for index in indexes
        ]
    return [f"{create(index)} IF NOT EXISTS {index.name} ON {index.sqlite}" for index in indexes]


def superseded_index_statements(dialect_name: str, names) -> list[str]:
    concurrently = " CONCURRENTLY" if dialect_name == "postgresql" else ""
    return [f"DROP INDEX{concurrently} IF EXISTS {name}" for name in names]


def index_statements(dialect_name: str) -> list[str]:
    """What `create-indexes` runs: the recommended indexes, then the drop of the superseded ones
    (their replacements exist by then)."""
    return recommended_index_statements(dialect_name) + superseded_index_statements(
        dialect_name, SUPERSEDED_INDEXES
    )


@dataclass(frozen=True)
class IndexAdvice:
    """What `doctor`, `create-indexes` and the recovery_indexes check report: the recommended
    indexes missing (an INVALID one counts as missing: the planner never uses it), and the
    superseded ones present, each with the statements that fix them."""

    missing: list[RecommendedIndex]
    # of `missing`, those in the catalog but INVALID (rebuilt: dropped, then created)
    invalid: list[str]
    create_with: list[str]
    superseded: list[str]
    drop_with: list[str]


def index_advice(conn: Connection) -> IndexAdvice:
    """Which recommended indexes the database lacks and which superseded ones it still has (by
    name): one catalog inspection for both questions, one more for validity."""
    from batch_pipeline.san.dialects import dialect  # the dialect modules import this one

    inspector = inspect(conn)
    present = {
        ix["name"]
        for table in {index.table for index in RECOMMENDED_INDEXES}
        for ix in inspector.get_indexes(table)
    }
    invalid = dialect(conn).invalid_indexes(
        conn, [index.name for index in RECOMMENDED_INDEXES if index.name in present]
    )
    missing = [
        index for index in RECOMMENDED_INDEXES if index.name not in present or index.name in invalid
    ]
    superseded = [name for name in SUPERSEDED_INDEXES if name in present]
    return IndexAdvice(
        missing=missing,
        invalid=invalid,
        create_with=superseded_index_statements(conn.dialect.name, invalid)
        + recommended_index_statements(conn.dialect.name, missing),
        superseded=superseded,
        drop_with=superseded_index_statements(conn.dialect.name, superseded),
    )


@dataclass(frozen=True)
class IndexChanges:
    """What `create_recommended_indexes` did, by index name."""

    created: list[str]
    rebuilt: list[str]  # were INVALID
    already_there: list[str]
    dropped: list[str]  # superseded
    statements: list[str]


def create_recommended_indexes(engine: Engine) -> IndexChanges:
    """Create the missing recommended indexes (rebuilding INVALID ones), then drop the superseded
    ones; safe to run again. On PostgreSQL CONCURRENTLY (the app's writes go on), outside a
    transaction, with statement_timeout off for this session: a role's timeout would cancel the
    build of a big index half-way and leave it INVALID."""
    # it imports the dialects, which import this
    from batch_pipeline.san.database import (
        read_transaction,
    )

    with read_transaction(engine) as conn:  # the catalog reads, with the pipeline's bounded waits
        advice = index_advice(conn)
    statements = advice.create_with + advice.drop_with
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("SET statement_timeout = 0"))
            for statement in statements:
                conn.execute(text(statement))
    else:
        with engine.begin() as conn:
            for statement in statements:
                conn.execute(text(statement))
    missing = {index.name for index in advice.missing}
    return IndexChanges(
        created=[index.name for index in advice.missing if index.name not in advice.invalid],
        rebuilt=list(advice.invalid),
        already_there=[index.name for index in RECOMMENDED_INDEXES if index.name not in missing],
        dropped=list(advice.superseded),
        statements=statements,
    )


def create_schema(engine: Engine, add_missing_tables: bool = False) -> list[str]:
    """Create the SAN tables in an empty database (embedded default, demos, tests); returns
    the tables created. A database that already holds any SAN table is refused: a half-present
    schema is a wrong URL or a broken SAN database, and an empty `jobs` created beside real
    scraps would only hide that. `add_missing_tables` creates the missing ones anyway."""
    with engine.connect() as conn:
        present = [
            table.name for table in metadata.sorted_tables if inspect(conn).has_table(table.name)
        ]
    if present and not add_missing_tables:
        raise SanSchemaError(
            f"refusing to create the SAN tables: this database already holds {', '.join(present)}. "
            "create-schema is "
            "for an empty database; check SAN_DATABASE_URL (a real SAN database needs no "
            "create-schema), or pass "
            "--add-missing-tables to create only the missing ones"
        )
    missing = [table for table in metadata.sorted_tables if table.name not in present]
    metadata.create_all(engine, tables=missing)
    return [table.name for table in missing]


# ---------------------------------------------------------------------------------------------
# Verification: a missing table or column fails with a message that names it.
# ---------------------------------------------------------------------------------------------
class SanSchemaError(RuntimeError):
    """The SAN database lacks a table or column the pipeline needs."""


def is_naive_timestamp(declared: Column, found) -> bool:
    """A column batch_pipeline reads as an instant (TIMESTAMPTZ) that the database holds as a
    wall-clock time (TIMESTAMP WITHOUT TIME ZONE)."""
    return (
        isinstance(declared.type, DateTime)
        and declared.type.timezone
        and getattr(found, "timezone", True) is False
    )


def verify_schema(conn: Connection) -> None:
    """Check that every table and column batch_pipeline uses exists; raise naming what is
    missing."""
    try:
        inspector = inspect(conn)
        existing_tables = set(inspector.get_table_names())
        problems: list[str] = []
        for table in metadata.sorted_tables:
            if table.name not in existing_tables:
                problems.append(f"table '{table.name}' is missing")
                continue
            present = {column["name"]: column for column in inspector.get_columns(table.name)}
            for column in table.columns:
                if column.name not in present:
                    problems.append(f"column '{table.name}.{column.name}' is missing")
                elif conn.dialect.name == "postgresql" and is_naive_timestamp(
                    column, present[column.name]["type"]
                ):
                    problems.append(
                        f"column '{table.name}.{column.name}' is TIMESTAMP WITHOUT TIME ZONE; "
                        "batch_pipeline "
                        "needs TIMESTAMPTZ (a naive timestamp is read in the session's zone, and "
                        "every age would "
                        "be off by its offset)"
                    )
    except SQLAlchemyError as error:
        raise SanSchemaError(f"could not inspect the SAN database schema: {error}") from error
    if problems:
        raise SanSchemaError(
            "the SAN database is not usable by batch_pipeline: "
            + "; ".join(problems)
            + ". batch_pipeline never alters app-owned tables: point SAN_DATABASE_URL at the SAN "
            "database (for the embedded demo database, `make run` or `python -m "
            "batch_pipeline.sandbox "
            "seed-demo` creates it)."
        )
