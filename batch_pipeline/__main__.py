"""Command line: `python -m batch_pipeline COMMAND [--database-url URL]`.

create-schema    create the SAN tables in an empty database (embedded default, demos, tests)
create-indexes   apply the recommended indexes and drop superseded ones (idempotent;
                 CONCURRENTLY on PostgreSQL)
show-indexes     print the index DDL without running it
doctor           is the SAN database ready? tables, columns, indexes, clock skew, dispatcher
"""

import argparse
import os
import sys

from sqlalchemy.exc import SQLAlchemyError

from batch_pipeline.doctor import run_doctor
from batch_pipeline.san.database import (
    SanConnectionError,
    check_connection,
    create_san_engine,
    embedded_database_url,
    read_transaction,
    redacted,
)
from batch_pipeline.san.schema import (
    SanSchemaError,
    app_guarantee_statement,
    create_recommended_indexes,
    create_schema,
    index_statements,
    verify_schema,
)

# Printed as a comment: piping show-indexes into psql must not build it (SAN's team decides).
APP_GUARANTEE_NOTE = """
-- The app-side guarantee, for SAN's team to decide (create-indexes does not build it): at most
-- one active job per (job_type, target_id), whoever enqueues it, so the app's own enqueue can
-- never race batch_pipeline's into two active jobs. With it, the app's second enqueue of an
-- active target fails with a unique violation; batch_pipeline's is skipped (skipped_by_race).
-- Its cost: docs/benchmarks.md, "The app-side guarantee"."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m batch_pipeline",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "command", choices=["create-schema", "create-indexes", "show-indexes", "doctor"]
    )
    parser.add_argument(
        "--database-url",
        default=os.environ.get("SAN_DATABASE_URL") or embedded_database_url(),
        help="SQLAlchemy URL (default: SAN_DATABASE_URL, else the embedded SQLite file)",
    )
    parser.add_argument(
        "--add-missing-tables",
        action="store_true",
        help="create-schema: create only the missing tables of a database that holds some already",
    )
    args = parser.parse_args(argv)
    if args.command == "doctor":
        return run_doctor(args.database_url)
    try:
        engine = create_san_engine(args.database_url)
        if args.command == "show-indexes":
            print(";\n".join(index_statements(engine.dialect.name)) + ";")
            print(APP_GUARANTEE_NOTE + "\n-- " + app_guarantee_statement(engine.dialect.name) + ";")
            return 0
        check_connection(engine)
        if args.command == "create-indexes":
            return create_indexes(engine)
        if args.command == "create-schema":
            created = create_schema(engine, add_missing_tables=args.add_missing_tables)
            print(
                f"created {', '.join(created) if created else 'no table'}; schema ready at "
                f"{redacted(engine.url)}"
            )
    except (SanConnectionError, SanSchemaError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


def create_indexes(engine) -> int:
    """Check the tables first (an index on a missing column is a 60-line traceback otherwise),
    then build; say what was created, rebuilt, already there and dropped; one line per error."""
    try:
        with read_transaction(engine) as conn:
            verify_schema(conn)
        changes = create_recommended_indexes(engine)
    except SanSchemaError as error:
        print(
            f"error: {error}. Point SAN_DATABASE_URL at the SAN database; no index was created.",
            file=sys.stderr,
        )
        return 2
    except SQLAlchemyError as error:
        cause = getattr(error, "orig", error)
        first_line = (str(cause).strip().splitlines() or [""])[0]
        sqlstate = getattr(cause, "sqlstate", None)
        hint = {
            "42501": "the role may not create indexes on these tables: run it as their owner",
            "55P03": "a table is locked (a migration?): run it again when the lock is gone",
            "57014": "cancelled (a statement or lock timeout): run it again; an index left INVALID "
            "is rebuilt",
        }.get(
            sqlstate,
            "fix the cause and run it again: it is idempotent, and rebuilds an index left INVALID",
        )
        print(
            f"error: {type(cause).__name__}{f' (SQLSTATE {sqlstate})' if sqlstate else ''}: "
            f"{first_line}. {hint}",
            file=sys.stderr,
        )
        return 2
    finally:
        engine.dispose()
    for statement in changes.statements:
        print(f"{statement};")
    for label, names in (
        ("created", changes.created),
        ("rebuilt (was INVALID)", changes.rebuilt),
        ("already there", changes.already_there),
        ("dropped (superseded)", changes.dropped),
    ):
        print(f"{label}: {', '.join(names) if names else '-'}")
    print(f"recommended indexes present at {redacted(engine.url)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
