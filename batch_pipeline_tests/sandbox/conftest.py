"""Sandbox fixtures: a sandbox database on SQLite and on PostgreSQL.

On PostgreSQL each test gets a database of its own, not a schema: pg_notify channels are per
database, so a test's workers must not hear another test's jobs.
"""

import pytest
from sqlalchemy.engine import make_url

from batch_pipeline.san.database import create_san_engine
from batch_pipeline_tests.conftest import SanDb, pg_admin_url
from san_sandbox.app_schema import SANDBOX_NICKNAME, init_sandbox
from san_sandbox.scratch import scratch_database


def pg_server_url() -> str:
    return make_url(pg_admin_url()).set(database="postgres").render_as_string(hide_password=False)


@pytest.fixture
def pg_scratch_url():
    with scratch_database(pg_server_url(), prefix="bp_test_sandbox") as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def sandbox(request, tmp_path):
    """A SanDb on a fresh sandbox database (the app's full tables, marked san_sandbox)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'sandbox.sqlite'}"
        engine = create_san_engine(url)
        init_sandbox(engine)
        yield SanDb(url, engine, "sqlite", nickname=f"{SANDBOX_NICKNAME} of a test")
        engine.dispose()
        return
    with scratch_database(pg_server_url(), prefix="bp_test_sandbox") as url:
        engine = create_san_engine(url)
        init_sandbox(engine)
        yield SanDb(url, engine, "postgres", nickname=f"{SANDBOX_NICKNAME} of a test")
        engine.dispose()


class ListedEvents:
    """Announcements handed to a worker by the test: each list once, then silence."""

    def __init__(self, *batches):
        self.batches = [list(batch) for batch in batches]

    def next_job_ids(self, timeout_s):
        return self.batches.pop(0) if self.batches else []

    def close(self):
        pass
