"""Fixtures: every SAN test runs on SQLite (schema created by batch_pipeline) and on the real
PostgreSQL (schema created by the SAN application's own DDL, no recovery indexes).

PostgreSQL tests get a schema of their own in SAN_TEST_DATABASE_URL (default: the local
server's `test` database), so they can run in parallel. If PostgreSQL is down they fail: a
skipped database counted as passing would be a lie.
"""

import json
import os
import signal
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import func, insert, select, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import OperationalError

from batch_pipeline.san.database import create_san_engine, utc_now
from batch_pipeline.san.dialects.postgresql import has_target_index
from batch_pipeline.san.dispatch import Dispatcher
from batch_pipeline.san.schema import create_recommended_indexes, create_schema
from batch_pipeline.san.tables import (
    COMPLETED,
    PENDING,
    daily_summaries,
    jobs,
    knowledge_cards,
    scraps,
    users,
)
from san_sandbox.app_schema import APP_DDL

DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def pytest_configure(config):
    """Tests start processes and stop them with SIGTERM and SIGINT, so neither may be ignored
    here: a suite started in the background by a non-interactive shell (`cmd &`) inherits
    SIGINT ignored, and each in-process Dagster run then sets SIGTERM to SIGINT's handler
    (dagster._utils.interrupts), which every process started afterwards would inherit."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def pg_admin_url() -> str:
    return os.environ.get("SAN_TEST_DATABASE_URL") or DEFAULT_PG_URL


def schema_url(base: str, schema: str) -> str:
    url = make_url(base)
    if url.drivername in ("postgresql", "postgresql+psycopg2"):
        url = url.set(drivername="postgresql+psycopg")
    return url.update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(
        hide_password=False
    )


def with_session_defaults(url: str, options: str) -> str:
    """`url` whose sessions start with `options` (`-c name=value ...`), as a role's or a
    database's own defaults would (ALTER ROLE/DATABASE ... SET, which these tests cannot do on
    the shared server)."""
    parsed = make_url(url)
    return parsed.update_query_dict(
        {"options": f"{parsed.query.get('options', '')} {options}".strip()}
    ).render_as_string(hide_password=False)


# DateStyle 'SQL, DMY' as a role's default: psycopg then refuses every timestamp it reads.
ODD_SESSION_DEFAULTS = "-cdatestyle=SQL,DMY -cintervalstyle=sql_standard -cextra_float_digits=-3"


class SanDb:
    """A SAN database for one test, with small helpers to build a state and read it back."""

    def __init__(self, url: str, engine: Engine, kind: str, nickname: str | None = None):
        self.url = url
        self.engine = engine
        self.kind = kind
        self.nickname = nickname  # of the users it makes: a sandbox's are the sandbox's own
        self.now = utc_now()

    def ago(self, **delta) -> datetime:
        return self.now - timedelta(**delta)

    def user(self, nickname: str | None = None) -> int:
        nickname = nickname or self.nickname
        with self.engine.begin() as conn:
            if nickname is not None:  # the app's DDL has it; the pipeline's own tables do not
                return conn.execute(
                    text("INSERT INTO users (nickname) VALUES (:nickname) RETURNING id"),
                    {"nickname": nickname},
                ).scalar_one()
            if self.kind == "sqlite":
                return conn.execute(
                    insert(users).values(id=None).returning(users.c.id)
                ).scalar_one()
            return conn.execute(text("INSERT INTO users DEFAULT VALUES RETURNING id")).scalar_one()

    def scrap(
        self,
        user_id: int,
        created_at: datetime | None = None,
        refined: bool = True,
        card: bool = False,
    ) -> int:
        created_at = created_at or self.ago(days=1)
        with self.engine.begin() as conn:
            scrap_id = conn.execute(
                insert(scraps)
                .values(
                    user_id=user_id,
                    original_content="original",
                    refined_content="refined" if refined else None,
                    created_at=created_at,
                    updated_at=created_at,
                )
                .returning(scraps.c.id)
            ).scalar_one()
            if card:
                conn.execute(
                    insert(knowledge_cards).values(
                        scrap_id=scrap_id, user_id=user_id, created_at=created_at
                    )
                )
        return scrap_id

    def summary(
        self,
        user_id: int,
        created_at: datetime | None = None,
        content: str | None = None,
        target_date=None,
    ) -> int:
        """A daily summary; content None: its TIL was never written."""
        created_at = created_at or self.ago(days=1)
        with self.engine.begin() as conn:
            return conn.execute(
                insert(daily_summaries)
                .values(
                    user_id=user_id,
                    target_date=target_date or created_at.date(),
                    content=content,
                    created_at=created_at,
                )
                .returning(daily_summaries.c.id)
            ).scalar_one()

    def card(self, scrap_id: int, user_id: int, created_at: datetime | None = None) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                insert(knowledge_cards).values(
                    scrap_id=scrap_id, user_id=user_id, created_at=created_at or self.now
                )
            )

    def job(
        self,
        job_type: str,
        target_id: int,
        status: str = PENDING,
        created_at: datetime | None = None,
        started_at: datetime | None = None,
        updated_at: datetime | None = None,
    ) -> int:
        # a job exists before a worker takes it: no later than its started_at or updated_at
        created_at = created_at or min(t for t in (self.now, started_at, updated_at) if t)
        with self.engine.begin() as conn:
            return conn.execute(
                insert(jobs)
                .values(
                    job_type=job_type,
                    target_id=target_id,
                    status=status,
                    created_at=created_at,
                    updated_at=updated_at or started_at or created_at,
                    started_at=started_at,
                    finished_at=created_at if status == COMPLETED else None,
                )
                .returning(jobs.c.id)
            ).scalar_one()

    def jobs(self, **where) -> list:
        query = select(jobs).order_by(jobs.c.id)
        for column, value in where.items():
            query = query.where(jobs.c[column] == value)
        with self.engine.connect() as conn:
            return conn.execute(query).all()

    def get_job(self, job_id: int):
        with self.engine.connect() as conn:
            return conn.execute(select(jobs).where(jobs.c.id == job_id)).one()

    def count(self, table, *where) -> int:
        with self.engine.connect() as conn:
            return conn.execute(select(func.count()).select_from(table).where(*where)).scalar_one()

    def plan(self, statement, *settings: str) -> str:
        """PostgreSQL's EXPLAIN of `statement` under `SET LOCAL` `settings` (e.g.
        "enable_seqscan = off": a test's table is tiny, so force the choice at scale)."""
        with self.engine.begin() as conn:
            for setting in settings:
                conn.exec_driver_sql(f"SET LOCAL {setting}")
            compiled = statement.compile(conn, compile_kwargs={"render_postcompile": True})
            explained = conn.exec_driver_sql("EXPLAIN " + str(compiled), compiled.params)
            return "\n".join(row[0] for row in explained)

    def summaries(self) -> list:
        with self.engine.connect() as conn:
            return conn.execute(select(daily_summaries).order_by(daily_summaries.c.id)).all()

    @contextmanager
    def role(self, prefix: str, table_privileges: str) -> Iterator[tuple[str, str]]:
        """A throw-away login role (PostgreSQL) with `table_privileges` on this database's SAN
        tables: (its name, a URL connecting as it), dropped with whatever it was granted."""
        role = f"{prefix}_{uuid.uuid4().hex[:8]}"
        schema = make_url(self.url).query["options"].split("=")[1]
        with self.engine.begin() as conn:
            conn.execute(text(f"CREATE ROLE {role} LOGIN"))
            conn.execute(text(f"GRANT USAGE ON SCHEMA {schema} TO {role}"))
            conn.execute(
                text(f"GRANT {table_privileges} ON ALL TABLES IN SCHEMA {schema} TO {role}")
            )
        try:
            yield role, make_url(self.url).set(username=role).render_as_string(hide_password=False)
        finally:
            with self.engine.begin() as conn:
                conn.execute(text(f"DROP OWNED BY {role}"))
                conn.execute(text(f"DROP ROLE {role}"))


def make_sqlite_db(tmp_path: Path) -> SanDb:
    url = f"sqlite:///{tmp_path / 'san.sqlite'}"
    engine = create_san_engine(url)
    create_schema(engine)
    return SanDb(url, engine, "sqlite")


class PgSchema:
    """A throw-away schema in the test database, created from the SAN app's own DDL."""

    def __init__(self, app_ddl: bool = True):
        self.name = f"bp_test_{uuid.uuid4().hex[:12]}"
        self.admin = create_san_engine(pg_admin_url())
        with self.admin.begin() as conn:
            conn.execute(text(f"CREATE SCHEMA {self.name}"))
        self.url = schema_url(pg_admin_url(), self.name)
        self.engine = create_san_engine(self.url)
        if app_ddl:
            with self.engine.begin() as conn:
                conn.exec_driver_sql(APP_DDL.read_text())
        else:
            create_schema(self.engine)

    def drop(self) -> None:
        """Drop the test's schema. A connection the test left open in a transaction would block
        the drop (and, through CREATE INDEX CONCURRENTLY, the other worker's tests) until the
        suite's timeout: fail within 30 s instead, naming it."""
        self.engine.dispose()
        try:
            with self.admin.begin() as conn:
                conn.execute(text("SET LOCAL lock_timeout = '30s'"))
                conn.execute(text(f"DROP SCHEMA {self.name} CASCADE"))
        except OperationalError as error:
            with self.admin.connect() as conn:
                holders = conn.execute(
                    text(
                        "SELECT DISTINCT a.pid, a.state, left(a.query, 120) FROM pg_locks l JOIN "
                        "pg_class c ON c.oid = l.relation "
                        "JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_stat_activity a ON "
                        "a.pid = l.pid "
                        "WHERE n.nspname = :schema AND a.pid <> pg_backend_pid()"
                    ),
                    {"schema": self.name},
                ).all()
                for pid, _state, _query in holders:  # so the rest of the suite is not blocked too
                    conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
                conn.execute(text(f"DROP SCHEMA IF EXISTS {self.name} CASCADE"))
                conn.commit()
            raise AssertionError(
                f"the test left a connection open in a transaction on its schema: {holders}"
            ) from error
        finally:
            self.admin.dispose()


@contextmanager
def san_database(kind: str, tmp_path: Path) -> Iterator[SanDb]:
    """A SanDb for one test: SQLite in tmp_path, or a PostgreSQL schema from the app's DDL."""
    if kind == "sqlite":
        db = make_sqlite_db(tmp_path)
        try:
            yield db
        finally:
            db.engine.dispose()
        return
    schema = PgSchema(app_ddl=True)
    try:
        yield SanDb(schema.url, schema.engine, "postgres")
    finally:
        schema.drop()


# The write paths: SQLite; PostgreSQL as the app's DDL leaves it (count query + insert); and
# PostgreSQL with ix_san_jobs_target (one statement per batch).
WRITE_PATHS = ["sqlite", "postgres", "postgres_with_target_index"]
PG_WRITE_PATHS = [path for path in WRITE_PATHS if path.startswith("postgres")]


class Notifications(list):
    """The payloads a test heard, and the channel it listened on (its own)."""

    def __init__(self, channel: str):
        super().__init__()
        self.channel = channel


@contextmanager
def job_notifications(db: "SanDb") -> Iterator[Notifications]:
    """LISTEN on a channel of this test's own during the block (LISTEN channels are per
    database, not per schema: tests in the shared test database must not hear each other);
    afterwards the list holds every payload received on it (each one, duplicates included),
    collected until the channel has been quiet for 1 s. Announce with `received.channel`."""
    url = make_url(db.url)
    conn = psycopg.connect(
        host=url.host,
        port=url.port or 5432,
        user=url.username,
        dbname=url.database,
        autocommit=True,
    )
    received = Notifications(f"san_jobs_test_{uuid.uuid4().hex[:12]}")
    try:
        conn.execute(f"LISTEN {received.channel}")
        yield received
        received += [json.loads(n.payload) for n in conn.notifies(timeout=1)]
    finally:
        conn.close()


@contextmanager
def san_database_on_path(path: str, tmp_path: Path) -> Iterator[SanDb]:
    with san_database(path.split("_")[0], tmp_path) as database:
        if path == "postgres_with_target_index":
            create_recommended_indexes(database.engine)
        if database.kind == "postgres":
            with database.engine.connect() as conn:
                assert has_target_index(conn) is (path == "postgres_with_target_index")
        yield database


@pytest.fixture(params=["sqlite", "postgres"])
def san_db(request, tmp_path):
    with san_database(request.param, tmp_path) as db:
        yield db


@pytest.fixture
def pg_db(tmp_path):
    with san_database("postgres", tmp_path) as db:
        yield db


class DiesOnBatch(Dispatcher):
    """A process that dies inside the n-th write batch, after its writes ran, before commit."""

    def __init__(self, n: int):
        self.n, self.calls = n, 0

    def announce_in_transaction(self, conn, new_jobs):
        self.calls += 1
        if self.calls == self.n:
            raise RuntimeError("worker process killed")


@pytest.fixture
def dagster_pg_storage(monkeypatch):
    """A PostgreSQL database for a Dagster instance's storage (dropped afterwards): its
    DAGSTER_PG_* variables, also set in this process, which reads the same instance."""
    from batch_pipeline_tests.processes import dagster_storage_database

    with dagster_storage_database(pg_admin_url()) as storage:
        for name, value in storage.items():
            monkeypatch.setenv(name, value)
        yield storage
