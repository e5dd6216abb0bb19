"""Command line: `python -m batch_pipeline COMMAND [--database-url URL] ...`.

create-schema    create the SAN tables in an empty database (embedded default, demos, tests)
create-indexes   apply the recommended indexes and drop superseded ones (idempotent;
                 CONCURRENTLY on PostgreSQL)
show-indexes     print the index DDL without running it
doctor           is the SAN database ready? tables, columns, indexes, clock skew, dispatcher
explain          the story of one scrap, summary or job: its jobs, the verdict of the
                 recoveries' rules now, every Dagster run that touched it (reads only)
redrive          one more job, beyond max_attempts, for exhausted targets (a dry run unless
                 --apply; recorded as a redrive_job run in the Dagster instance)
metrics          serve Prometheus metrics (backlog, heals, time to heal, the healer's liveness)
                 on http://127.0.0.1:9464/metrics, reading SAN and DAGSTER_HOME's instance
"""

import argparse
import os
import sys

from sqlalchemy.exc import SQLAlchemyError

from batch_pipeline.doctor import run_doctor
from batch_pipeline.monitoring.exporter import CACHE_SECONDS, DEFAULT_HOST, DEFAULT_PORT
from batch_pipeline.monitoring.server import serve
from batch_pipeline.recovery.cadence import CadenceError
from batch_pipeline.recovery.registry import TARGET_RECOVERIES
from batch_pipeline.san.database import (
    SanConnectionError,
    check_connection,
    create_san_engine,
    embedded_database_url,
    read_transaction,
    redacted,
)
from batch_pipeline.san.errors import first_line as first_line_of
from batch_pipeline.san.schema import (
    IndexConflictError,
    SanSchemaError,
    app_guarantee_statement,
    create_recommended_indexes,
    create_schema,
    index_statements,
    verify_schema,
)
from batch_pipeline.san.tables import MAX_ID
from batch_pipeline.san.timezone import TimezoneConfigError
from batch_pipeline.support.cli import explain_command, redrive_command
from batch_pipeline.support.touches import KINDS

# Printed as a comment: piping show-indexes into psql must not build it (SAN's team decides).
APP_GUARANTEE_NOTE = """
-- The app-side guarantee, for SAN's team to decide (create-indexes does not build it): at most
-- one active job per (job_type, target_id), whoever enqueues it, so the app's own enqueue can
-- never race batch_pipeline's into two active jobs. With it, the app's second enqueue of an
-- active target fails with a unique violation; batch_pipeline's is skipped (skipped_by_race).
-- Its cost: docs/benchmarks.md, "The app-side guarantee"."""


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "metrics":
        return metrics_command(args)
    if args.command == "explain":
        return explain_command(args.database_url, args.kind, args.id, args.json)
    if args.command == "redrive":
        return redrive_command(args.database_url, redrive_options(args), args.apply, args.json)
    if args.command == "doctor":
        return run_doctor(args.database_url)
    return schema_command(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m batch_pipeline",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    database = argparse.ArgumentParser(add_help=False)
    database.add_argument(
        "--database-url",
        default=os.environ.get("SAN_DATABASE_URL") or embedded_database_url(),
        help="SQLAlchemy URL (default: SAN_DATABASE_URL, else the embedded SQLite file)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    create = commands.add_parser("create-schema", parents=[database], help="create the SAN tables")
    create.add_argument(
        "--add-missing-tables",
        action="store_true",
        help="create only the missing tables of a database that holds some already",
    )
    for name, words in (
        ("create-indexes", "apply the recommended indexes"),
        ("show-indexes", "print the index DDL"),
        ("doctor", "is the SAN database ready?"),
    ):
        commands.add_parser(name, parents=[database], help=words)
    story = commands.add_parser("explain", parents=[database], help="one target's story")
    story.add_argument("kind", choices=KINDS, help="what the id is")
    story.add_argument("id", type=positive_id, help="its id in SAN's database")
    story.add_argument("--json", action="store_true", help="JSON, for machines")
    add_redrive_arguments(
        commands.add_parser("redrive", parents=[database], help="another job for exhausted targets")
    )
    metrics = commands.add_parser("metrics", parents=[database], help="serve Prometheus metrics")
    metrics.add_argument("--port", type=port_number, default=DEFAULT_PORT, help="default 9464")
    metrics.add_argument("--host", default=DEFAULT_HOST, help="default 127.0.0.1 (this host only)")
    metrics.add_argument(
        "--cache-seconds",
        type=float,
        default=CACHE_SECONDS,
        help=f"serve readings this old before reading again (default {CACHE_SECONDS:g})",
    )
    return parser


def add_redrive_arguments(again: argparse.ArgumentParser) -> None:
    again.add_argument("--area", required=True, choices=[r.area for r in TARGET_RECOVERIES])
    again.add_argument(
        "--ids", type=id_list, default=[], help="only these target ids (comma-separated)"
    )
    again.add_argument(
        "--failed-since",
        default="",
        help="only targets whose latest failure is at or after this ISO 8601 date or date-time",
    )
    again.add_argument(
        "--error-contains", default="", help="only targets whose latest error contains this"
    )
    again.add_argument("--limit", type=int, help="at most this many targets (default 100)")
    again.add_argument("--max-attempts", type=int, help="the cap they reached (default 10)")
    again.add_argument("--reason", default="", help="why, for the audit trail")
    again.add_argument("--apply", action="store_true", help="enqueue (default: a dry run)")
    again.add_argument("--json", action="store_true", help="the audit entry as JSON")


def redrive_options(args) -> dict:
    return {
        "area": args.area,
        "target_ids": args.ids,
        "failed_since": args.failed_since,
        "error_message_contains": args.error_contains,
        "limit": args.limit,
        "max_attempts": args.max_attempts,
        "reason": args.reason,
    }


def schema_command(args) -> int:
    """create-schema, create-indexes, show-indexes."""
    try:
        engine = create_san_engine(args.database_url)
        if args.command == "show-indexes":
            print(";\n".join(index_statements(engine.dialect.name)) + ";")
            print(APP_GUARANTEE_NOTE + "\n-- " + app_guarantee_statement(engine.dialect.name) + ";")
            return 0
        check_connection(engine)
        if args.command == "create-indexes":
            return create_indexes(engine)
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
    except IndexConflictError as error:
        print(f"error: {error}; no index was created or dropped.", file=sys.stderr)
        return 2
    except SQLAlchemyError as error:
        cause = getattr(error, "orig", error)
        first_line = first_line_of(cause)
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
        ("kept (superseded, until the replacement is valid)", changes.kept),
    ):
        print(f"{label}: {', '.join(names) if names else '-'}")
    print(f"recommended indexes present at {redacted(engine.url)}")
    return 0


def metrics_command(args) -> int:
    try:
        return serve(args.database_url, args.host, args.port, args.cache_seconds)
    except (SanConnectionError, CadenceError, TimezoneConfigError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"error: cannot listen on {args.host}:{args.port}: {error}", file=sys.stderr)
        return 2


def port_number(value: str) -> int:
    if not value.isdigit() or not 1 <= int(value) <= 65535:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port (1-65535)")
    return int(value)


def positive_id(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an id (a whole number)") from None
    if not 0 < number <= MAX_ID:
        raise argparse.ArgumentTypeError(f"{value!r} is not an id (ids are 1 to {MAX_ID})")
    return number


def id_list(value: str) -> list[int]:
    return [positive_id(part.strip()) for part in value.split(",") if part.strip()]


if __name__ == "__main__":
    sys.exit(main())
