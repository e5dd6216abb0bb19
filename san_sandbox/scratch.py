"""Throw-away PostgreSQL databases for sandbox runs (the convergence script and test)."""

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import text
from sqlalchemy.engine import make_url

from batch_pipeline.san.database import create_san_engine

DEFAULT_SERVER_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


@contextmanager
def scratch_database(
    server_url: str = DEFAULT_SERVER_URL, prefix: str = "san_sandbox"
) -> Iterator[str]:
    """A new, empty database on the server of `server_url`, dropped afterwards; yields its URL.

    A database of its own, not a schema: pg_notify channels are per database, so a sandbox's
    workers hear only its own jobs."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = create_san_engine(server_url).execution_options(isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    url = make_url(server_url).set(database=name)
    if url.get_driver_name() in ("", "psycopg2"):
        url = url.set(drivername="postgresql+psycopg")
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()
