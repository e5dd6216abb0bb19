"""No secret leaks: with a password in SAN_DATABASE_URL's query (libpq style) and in the Redis
URL, a recovery run whose announcements fail writes neither to any log, event or metadata."""

import logging

from dagster import DagsterInstance

from batch_pipeline.definitions import defs
from batch_pipeline.recovery.assets import recovery_run_config
from batch_pipeline.san.resources import JobDispatcherResource, SanDatabase
from batch_pipeline.san.tables import CARD_ANALYSIS, PENDING

SAN_SECRET, REDIS_SECRET = "s4nPassw0rdXYZ", "r3disPassw0rdXYZ"


def test_no_password_appears_in_any_log_event_or_metadata(pg_db, caplog, capfd):
    # a ghost: its replacement is announced
    pg_db.job(CARD_ANALYSIS, 1, PENDING, created_at=pg_db.ago(hours=1))
    url = pg_db.url + f"&password={SAN_SECRET}"  # trust auth: accepted and ignored
    dead_redis = f"redis://:{REDIS_SECRET}@127.0.0.1:1/0"
    instance = DagsterInstance.ephemeral()
    with caplog.at_level(logging.DEBUG):
        result = defs.resolve_job_def("recovery_job").execute_in_process(
            run_config=recovery_run_config(),
            resources={
                "san_database": SanDatabase(url=url),
                "job_dispatcher": JobDispatcherResource(kind="redis_stream", redis_url=dead_redis),
            },
            instance=instance,
        )
    assert result.success
    records = instance.all_logs(result.run_id)
    # the failed announcement was really logged
    assert (
        any("could not announce" in (entry.user_message or "") for entry in records)
        or "could not announce" in caplog.text
    )
    everything = "\n".join(
        [
            caplog.text,
            *capfd.readouterr(),
            *(entry.user_message or "" for entry in records),
            *(repr(entry.dagster_event) for entry in records if entry.dagster_event is not None),
        ]
    )
    assert "SAN database postgresql+psycopg://postgres@" in everything  # the URL itself is shown
    assert SAN_SECRET not in everything and REDIS_SECRET not in everything
