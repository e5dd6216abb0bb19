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

from batch_pipeline.doctor import run_doctor
from batch_pipeline.san.database import (
    SanConnectionError,
    check_connection,
    create_san_engine,
    embedded_database_url,
    redacted,
)
from batch_pipeline.san.schema import create_recommended_indexes, create_schema, index_statements


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m batch_pipeline", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["create-schema", "create-indexes", "show-indexes", "doctor"])
    parser.add_argument(
        "--database-url",
        default=os.environ.get("SAN_DATABASE_URL") or embedded_database_url(),
        help="SQLAlchemy URL (default: SAN_DATABASE_URL, else the embedded SQLite file)",
    )
    args = parser.parse_args(argv)
    if args.command == "doctor":
        return run_doctor(args.database_url)
    try:
        engine = create_san_engine(args.database_url)
        if args.command == "show-indexes":
            print(";\n".join(index_statements(engine.dialect.name)) + ";")
            return 0
        check_connection(engine)
        if args.command == "create-schema":
            create_schema(engine)
            print(f"schema ready at {redacted(engine.url)}")
        elif args.command == "create-indexes":
            for statement in create_recommended_indexes(engine):
                print(f"{statement};")
            print(f"recommended indexes present at {redacted(engine.url)}")
    except SanConnectionError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
