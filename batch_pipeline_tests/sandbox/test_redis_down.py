"""Redis down with SAN_JOB_DISPATCHER=redis_stream: the run still commits its jobs and succeeds,
counts and logs the announcements it could not make, and the next recovery run heals the jobs
no worker ever heard of."""

import uuid
from datetime import timedelta

import redis
from dagster import DagsterInstance

from batch_pipeline.definitions import defs
from batch_pipeline.san.dispatch import Dispatcher
from batch_pipeline.san.resources import JobDispatcherResource, SanDatabase
from batch_pipeline.san.tables import CARD_ANALYSIS, COMPLETED, FAILED, PENDING, knowledge_cards
from bench.convergence import latest_audit
from san_sandbox.app import save_scraps
from san_sandbox.events import RedisStreamEvents
from san_sandbox.faults import Faults
from san_sandbox.time_travel import age_database
from san_sandbox.worker import ReferenceWorker

REDIS_URL = "redis://127.0.0.1:6379/0"
DEAD_REDIS_URL = "redis://127.0.0.1:1/0"


def recovery_run(db, instance, redis_url, stream):
    return defs.resolve_job_def("recovery_job").execute_in_process(
        resources={
            "san_database": SanDatabase(url=db.url),
            "job_dispatcher": JobDispatcherResource(
                kind="redis_stream", redis_url=redis_url, redis_stream=stream
            ),
        },
        instance=instance,
    )


def test_redis_down_the_run_succeeds_counts_the_failures_and_the_next_run_heals(sandbox):
    stream = f"bp_test:jobs:{uuid.uuid4().hex[:8]}"
    # 6 scraps whose app died before their jobs: orphans and unrefined for the recovery
    save_scraps(
        sandbox.engine, Dispatcher(), count=6, users=2, faults=Faults(app_dies_before_enqueue=1.0)
    )
    age_database(sandbox.engine, timedelta(hours=1))
    worker = ReferenceWorker(sandbox.engine, RedisStreamEvents(REDIS_URL, "w0", stream=stream))
    instance = DagsterInstance.ephemeral()
    try:
        down = recovery_run(sandbox, instance, DEAD_REDIS_URL, stream)
        assert down.success
        orphans = latest_audit(instance, "orphan_scrap_recovery")
        unrefined = latest_audit(instance, "orphan_scrap_refine_recovery")
        assert (orphans["enqueued"], orphans["announce_failures"]) == (6, 6)
        assert (unrefined["enqueued"], unrefined["announce_failures"]) == (6, 6)
        assert len(sandbox.jobs(status=PENDING)) == 12  # committed all the same
        logs = [e.message for e in instance.all_logs(down.run_id) if e.message]
        # in the run log, per area
        assert sum("could not announce 6 new job(s)" in m for m in logs) == 2
        assert worker.drain(idle_s=0.5).heard == 0  # no worker ever heard of them

        age_database(sandbox.engine, timedelta(hours=1))  # 1 h later, Redis is back
        healed = recovery_run(sandbox, instance, REDIS_URL, stream)
        assert healed.success
        ghosts = latest_audit(instance, "ghost_job_recovery")
        assert (ghosts["enqueued"], ghosts["announce_failures"]) == (12, 0)
        assert worker.drain(idle_s=0.5).completed == 12
    finally:
        redis.Redis.from_url(REDIS_URL).delete(stream)
    assert len(sandbox.jobs(status=FAILED)) == 12 and len(sandbox.jobs(status=COMPLETED)) == 12
    assert sandbox.count(knowledge_cards) == 6
    assert all(
        job.retry_of_job_id for job in sandbox.jobs(status=COMPLETED, job_type=CARD_ANALYSIS)
    )
