"""The load generator saves scraps as the app does (scrap, then jobs, then the event), and the
workers hear those events on the channel the pipeline announces on."""

import uuid

import redis
from sqlalchemy import select

from batch_pipeline.san.database import create_san_engine
from batch_pipeline.san.dispatch import Dispatcher, PgNotifyDispatcher, RedisStreamDispatcher
from batch_pipeline.san.tables import (
    CARD_ANALYSIS,
    COMPLETED,
    PENDING,
    SCRAP_REFINE,
    jobs,
    scraps,
    users,
)
from san_sandbox.ai import POISON_MARKER
from san_sandbox.app import save_scraps
from san_sandbox.app_schema import app_scraps
from san_sandbox.events import PgNotifyEvents, PollingEvents, RedisStreamEvents
from san_sandbox.faults import Faults
from san_sandbox.worker import ReferenceWorker

REDIS_URL = "redis://127.0.0.1:6379/0"


def test_each_scrap_gets_its_two_jobs_and_app_deaths_leave_scraps_without_jobs(sandbox):
    report = save_scraps(
        sandbox.engine,
        Dispatcher(),
        count=200,
        users=20,
        faults=Faults(app_dies_before_enqueue=0.3, seed=3),
    )
    assert report.scraps == 200 and 40 < report.app_deaths < 80
    assert sandbox.count(users) == 20 and sandbox.count(scraps) == 200
    assert sandbox.count(jobs) == report.jobs == 2 * (200 - report.app_deaths)
    with sandbox.engine.connect() as conn:
        without_jobs = (
            conn.execute(select(scraps.c.id).where(~scraps.c.id.in_(select(jobs.c.target_id))))
            .scalars()
            .all()
        )
    assert len(without_jobs) == report.app_deaths
    for scrap_id in {job.target_id for job in sandbox.jobs()}:
        assert sorted(j.job_type for j in sandbox.jobs(target_id=scrap_id)) == [
            CARD_ANALYSIS,
            SCRAP_REFINE,
        ]
    assert all(job.status == PENDING for job in sandbox.jobs())


def test_poison_scraps_carry_the_marker(sandbox):
    report = save_scraps(
        sandbox.engine, Dispatcher(), count=50, users=5, faults=Faults(poison=0.2, seed=1)
    )
    with sandbox.engine.connect() as conn:
        marked = set(
            conn.execute(
                select(app_scraps.c.id).where(app_scraps.c.original_content.contains(POISON_MARKER))
            ).scalars()
        )
    assert marked == set(report.poison_scrap_ids) and 0 < len(marked) < 50


def test_a_pg_notify_worker_hears_every_job_the_app_announces(pg_scratch_url):
    from san_sandbox.app_schema import init_sandbox

    engine = create_san_engine(pg_scratch_url)
    init_sandbox(engine)
    events = PgNotifyEvents(engine)  # listening before the app saves
    report = save_scraps(engine, PgNotifyDispatcher(), count=10, users=2)
    heard = []
    while batch := events.next_job_ids(0.5):
        heard += batch
    with engine.connect() as conn:
        assert (
            sorted(heard) == sorted(conn.execute(select(jobs.c.id)).scalars())
            and len(heard) == report.jobs
        )
    events.close()
    engine.dispose()


def test_a_redis_stream_worker_hears_every_job_once_across_the_group(sandbox):
    stream = f"bp_test:jobs:{uuid.uuid4().hex[:8]}"
    workers = [
        ReferenceWorker(sandbox.engine, RedisStreamEvents(REDIS_URL, f"w{i}", stream=stream))
        for i in range(2)
    ]
    try:
        report = save_scraps(
            sandbox.engine, RedisStreamDispatcher(REDIS_URL, stream=stream), count=10, users=2
        )
        stats = [w.drain(idle_s=0.3) for w in workers]
        # a consumer group: each entry to one worker
        assert sum(s.heard for s in stats) == report.jobs == 20
        assert sum(s.completed for s in stats) == 20
        assert all(job.status == COMPLETED for job in sandbox.jobs())
    finally:
        redis.Redis.from_url(REDIS_URL).delete(stream)


def test_a_polling_worker_hears_only_jobs_created_after_it_started(sandbox):
    old = save_scraps(sandbox.engine, Dispatcher(), count=2, users=1)
    events = PollingEvents(sandbox.engine, poll_every_s=0.05)
    assert events.next_job_ids(0.1) == []  # the jobs from before it started are not its news
    save_scraps(sandbox.engine, Dispatcher(), count=3, users=1)
    heard = events.next_job_ids(0.5)
    assert len(heard) == 6 and min(heard) > max(j.id for j in sandbox.jobs()[: old.jobs])
    assert events.next_job_ids(0.1) == []
