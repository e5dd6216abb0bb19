"""Throw-away PostgreSQL databases: created empty, dropped afterwards."""

from sqlalchemy import inspect, text

from batch_pipeline.san.database import create_san_engine
from batch_pipeline_tests.sandbox.conftest import pg_server_url
from san_sandbox.scratch import scratch_database


def test_a_scratch_database_is_empty_and_gone_afterwards():
    with scratch_database(pg_server_url(), prefix="bp_test_scratch") as url:
        name = url.rsplit("/", 1)[1]
        engine = create_san_engine(url)
        with engine.connect() as conn:
            assert inspect(conn).get_table_names() == []
        engine.dispose()
    admin = create_san_engine(pg_server_url())
    with admin.connect() as conn:
        exists = conn.execute(
            text("SELECT count(*) FROM pg_database WHERE datname = :name"), {"name": name}
        ).scalar_one()
    admin.dispose()
    assert exists == 0
