"""The Dagster resources: the SAN database and the dispatcher, from the environment, and the
failures that name what is wrong and are not retried."""

import pytest
from dagster import EnvVar, Failure

from batch_pipeline.san.resources import JobDispatcherResource, SanDatabase, san_resources


def test_set_variables_become_env_vars_and_unset_ones_the_defaults(monkeypatch):
    for name in ("SAN_DATABASE_URL", "SAN_JOB_DISPATCHER", "SAN_REDIS_URL", "SAN_NOTIFY_CHANNEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("SAN_REDIS_STREAM", raising=False)
    resources = san_resources()
    assert resources["san_database"].url is None
    assert (
        resources["job_dispatcher"].kind is None and resources["job_dispatcher"].redis_url is None
    )
    monkeypatch.setenv("SAN_REDIS_URL", "redis://:secret@cache:6379/0")
    dispatcher = san_resources()["job_dispatcher"]
    assert dispatcher.redis_url == EnvVar("SAN_REDIS_URL")  # the name in the UI, never the secret


def test_a_database_without_the_san_tables_is_a_failure_naming_them(tmp_path):
    database = SanDatabase(url=f"sqlite:///{tmp_path / 'empty.sqlite'}")
    with pytest.raises(Failure, match="table 'users' is missing") as failure:
        database.open_verified()
    assert failure.value.allow_retries is False


def test_an_unknown_dispatcher_is_a_failure_naming_it(san_db):
    with pytest.raises(Failure, match="SAN_JOB_DISPATCHER='kafka' is not a dispatcher"):
        JobDispatcherResource(kind="kafka").for_database(san_db.engine)
