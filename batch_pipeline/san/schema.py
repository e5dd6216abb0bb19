"""The SAN database's schema as batch_pipeline sees it: verified before any write, created in an
empty database (the embedded default, demos, tests), and the recommended indexes advised and
built (`python -m batch_pipeline create-indexes`). Nothing here ever alters an app-owned table.
"""

from dataclasses import dataclass

from sqlalchemy import func, inspect, select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from batch_pipeline.san.database import read_transaction
from batch_pipeline.san.dialects import DIALECTS, dialect
from batch_pipeline.san.indexes import (
    APP_ONE_ACTIVE_JOB,
    RECOMMENDED_INDEXES,
    SUPERSEDED_INDEXES,
    RecommendedIndex,
)
from batch_pipeline.san.tables import ACTIVE_STATUSES, jobs, metadata


class SanSchemaError(RuntimeError):
    """The SAN database lacks a table or column the pipeline needs."""


# -- verification: a missing table or column fails with a message that names it --------------
def verify_schema(conn: Connection) -> None:
    """Check that every table and column batch_pipeline uses exists with a type it can read;
    raise naming what is missing."""
    db_dialect = dialect(conn)
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
                elif problem := db_dialect.column_type_problem(
                    column, present[column.name]["type"]
                ):
                    problems.append(f"column '{table.name}.{column.name}' {problem}")
    except SQLAlchemyError as error:
        raise SanSchemaError(f"could not inspect the SAN database schema: {error}") from error
    if problems:
        raise SanSchemaError(
            "the SAN database is not usable by batch_pipeline: "
            + "; ".join(problems)
            + ". batch_pipeline never alters app-owned tables: point SAN_DATABASE_URL at the SAN "
            "database (for the embedded demo database, `make run` or "
            "`python -m san_sandbox seed-demo` creates it)."
        )


def create_schema(engine: Engine, add_missing_tables: bool = False) -> list[str]:
    """Create the SAN tables in an empty database (embedded default, demos, tests); returns
    the tables created. A database that already holds any SAN table is refused: a half-present
    schema is a wrong URL or a broken SAN database, and an empty `jobs` created beside real
    scraps would only hide that. `add_missing_tables` creates the missing ones anyway."""
    with engine.connect() as conn:
        inspector = inspect(conn)
        present = [
            table.name for table in metadata.sorted_tables if inspector.has_table(table.name)
        ]
    if present and not add_missing_tables:
        raise SanSchemaError(
            f"refusing to create the SAN tables: this database already holds {', '.join(present)}. "
            "create-schema is for an empty database; check SAN_DATABASE_URL (a real SAN database "
            "needs no create-schema), or pass --add-missing-tables to create only the missing ones"
        )
    missing = [table for table in metadata.sorted_tables if table.name not in present]
    metadata.create_all(engine, tables=missing)
    return [table.name for table in missing]


# -- the recommended indexes (san/indexes.py) ---------------------------------------------------
def index_statements(dialect_name: str) -> list[str]:
    """What `create-indexes` runs on a database without any: the recommended indexes, then the
    drop of the superseded ones (their replacements exist by then)."""
    db_dialect = DIALECTS[dialect_name]
    return [db_dialect.create_index_statement(index) for index in RECOMMENDED_INDEXES] + [
        db_dialect.drop_index_statement(name) for name in SUPERSEDED_INDEXES
    ]


def app_guarantee_statement(dialect_name: str) -> str:
    return DIALECTS[dialect_name].create_index_statement(APP_ONE_ACTIVE_JOB)


def app_guarantee_index(conn: Connection) -> str | None:
    """The name of a valid unique index on jobs (job_type, target_id), whatever the app calls
    it (partial on the active statuses, or over every row), or None."""
    names = [
        ix["name"]
        for ix in inspect(conn).get_indexes("jobs")
        if ix.get("unique") and set(ix["column_names"]) == {"job_type", "target_id"}
    ]
    invalid = set(dialect(conn).invalid_indexes(conn, names)) if names else set()
    return next((name for name in names if name not in invalid), None)


def targets_with_two_active_jobs(conn: Connection) -> int:
    """(job_type, target_id) pairs with more than one active job now: the unique index cannot
    be built until they are closed. Reads active jobs only (ix_san_jobs_active_covering)."""
    doubled = (
        select(jobs.c.job_type, jobs.c.target_id)
        .where(jobs.c.status.in_(ACTIVE_STATUSES))
        .group_by(jobs.c.job_type, jobs.c.target_id)
        .having(func.count() > 1)
        .subquery()
    )
    return conn.execute(select(func.count()).select_from(doubled)).scalar_one()


@dataclass(frozen=True)
class IndexAdvice:
    """What `doctor`, `create-indexes` and the recovery_indexes check report: the recommended
    indexes missing (an INVALID one counts as missing: the planner never uses it), those whose
    name is taken by another definition, and the superseded ones present, each with the
    statements that fix them."""

    missing: list[RecommendedIndex]
    # of `missing`, those in the catalog but INVALID (rebuilt: dropped, then created)
    invalid: list[str]
    create_with: list[str]
    # recommended names taken by an index of another definition: name -> the definition found.
    # Never built over nor dropped: it is someone's index; its owner renames or drops it.
    conflicting: dict[str, str]
    # superseded indexes whose replacement is valid and as recommended: safe to drop now
    superseded: list[str]
    drop_with: list[str]
    # superseded indexes kept until their replacement is in place
    superseded_kept: list[str]


class IndexConflictError(ValueError):
    """A recommended index's name is taken by an index of another definition."""


def index_advice(conn: Connection) -> IndexAdvice:
    """Which recommended indexes the database lacks or has under another definition (compared
    by definition, not trusted by name), and which superseded ones it still has."""
    db_dialect = dialect(conn)
    inspector = inspect(conn)
    tables = {index.table for index in RECOMMENDED_INDEXES}
    present = {ix["name"] for table in tables for ix in inspector.get_indexes(table)}
    invalid = db_dialect.invalid_indexes(
        conn, [index.name for index in RECOMMENDED_INDEXES if index.name in present]
    )
    conflicting = db_dialect.index_definition_problems(
        conn, [index for index in RECOMMENDED_INDEXES if index.name in present]
    )
    missing = [
        index
        for index in RECOMMENDED_INDEXES
        if (index.name not in present or index.name in invalid) and index.name not in conflicting
    ]
    # an INVALID index of another definition is someone else's: never dropped to rebuild it
    invalid = [name for name in invalid if name not in conflicting]
    not_ready = {index.name for index in missing} | set(conflicting)
    superseded = [
        name
        for name, replacement in SUPERSEDED_INDEXES.items()
        if name in present and replacement not in not_ready
    ]
    return IndexAdvice(
        missing=missing,
        invalid=invalid,
        create_with=[db_dialect.drop_index_statement(name) for name in invalid]
        + [db_dialect.create_index_statement(index) for index in missing],
        conflicting=conflicting,
        superseded=superseded,
        drop_with=[db_dialect.drop_index_statement(name) for name in superseded],
        superseded_kept=[
            name for name in SUPERSEDED_INDEXES if name in present and name not in superseded
        ],
    )


def conflict_message(conflicting: dict[str, str]) -> str:
    """Which recommended names another index holds, and what to do."""
    return (
        "; ".join(f"{name} exists as another index: {found}" for name, found in conflicting.items())
        + ". It is not the recommended one (table, columns, INCLUDE, predicate): rename or drop "
        "it, then run create-indexes again"
    )


@dataclass(frozen=True)
class IndexChanges:
    """What `create_recommended_indexes` did, by index name."""

    created: list[str]
    rebuilt: list[str]  # were INVALID
    already_there: list[str]
    dropped: list[str]  # superseded
    statements: list[str]
    kept: list[str]  # superseded, kept: their replacement is not in place


def create_recommended_indexes(engine: Engine) -> IndexChanges:
    """Create the missing recommended indexes (rebuilding INVALID ones), then drop the superseded
    ones whose replacement is then valid and as recommended; safe to run again, and runs take
    turns. A recommended name held by another definition stops it before anything is built
    (IndexConflictError). Each dialect builds them its way (PostgreSQL: CONCURRENTLY, so the
    app's writes go on, see postgresql.run_index_statements)."""
    db_dialect = dialect(engine)
    with db_dialect.index_build_lock(engine):
        with read_transaction(engine) as conn:  # the catalog, with the pipeline's bounded waits
            advice = index_advice(conn)
        if advice.conflicting:
            raise IndexConflictError(conflict_message(advice.conflicting))
        db_dialect.run_index_statements(engine, advice.create_with)
        # Drop only what is replaced now: a build that failed or was interrupted leaves its
        # replacement INVALID, and the superseded index stays.
        with read_transaction(engine) as conn:
            after = index_advice(conn)
        db_dialect.run_index_statements(engine, after.drop_with)
    missing = {index.name for index in advice.missing}
    return IndexChanges(
        created=[index.name for index in advice.missing if index.name not in advice.invalid],
        rebuilt=list(advice.invalid),
        already_there=[index.name for index in RECOMMENDED_INDEXES if index.name not in missing],
        dropped=list(after.superseded),
        statements=advice.create_with + after.drop_with,
        kept=list(after.superseded_kept),
    )
