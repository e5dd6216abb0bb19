"""Two recovery_job runs, each in a process of its own, forced to overlap after detection (both
have detected the same ghosts before either writes), while worker processes complete the very
jobs being examined, from the other end. No completed job is marked FAILED, every ghost is
closed exactly once, and no (job_type, target_id) ever has two active jobs."""

import multiprocessing
from datetime import timedelta

from sqlalchemy import func, select

from batch_pipeline.san.database import create_san_engine
from batch_pipeline.san.dispatch import Dispatcher
from batch_pipeline.san.resources import JobDispatcherResource, SanDatabase
from batch_pipeline.san.tables import COMPLETED, FAILED, knowledge_cards
from batch_pipeline_tests.conftest import SanDb
from bench.convergence import DUPLICATE_ACTIVE_JOBS
from san_sandbox.app import save_scraps
from san_sandbox.app_schema import init_sandbox
from san_sandbox.faults import Faults
from san_sandbox.pool import WorkerPool, WorkerSettings
from san_sandbox.time_travel import age_database

GHOST_SCRAPS = 200  # 400 ghost jobs: each scrap's SCRAP_REFINE and CARD_ANALYSIS
_meeting = {"barrier": None, "calls": 0}


class MeetAfterDetection(JobDispatcherResource):
    """The dispatcher, asked for by check_san_database (call 1) and then by recover_ghost_jobs
    (call 2), which runs after detect_ghost_jobs: waiting there makes both runs detect first."""

    def for_database(self, engine):
        _meeting["calls"] += 1
        if _meeting["calls"] == 2:
            _meeting["barrier"].wait(120)
        return super().for_database(engine)


def recovery_process(url, barrier, results):
    from dagster import AssetKey, DagsterInstance

    from batch_pipeline.definitions import defs
    from batch_pipeline.recovery.assets import recovery_run_config

    _meeting["barrier"] = barrier
    instance = DagsterInstance.ephemeral()
    result = defs.resolve_job_def("recovery_job").execute_in_process(
        run_config={
            **recovery_run_config({"batch_size": 10}),
            "loggers": {"console": {"config": {"log_level": "WARNING"}}},
        },
        resources={
            "san_database": SanDatabase(url=url),
            "job_dispatcher": MeetAfterDetection(kind="pg_notify"),
        },
        instance=instance,
        raise_on_error=False,
    )
    event = instance.get_latest_materialization_event(AssetKey("ghost_job_recovery"))
    meta = event.asset_materialization.metadata
    results.put(
        (
            result.success,
            meta["detected"].value,
            [r["failed_job_id"] for r in meta["recovered"].value],
        )
    )


def test_two_recovery_processes_and_worker_processes_on_the_same_ghosts(pg_scratch_url):
    engine = create_san_engine(pg_scratch_url)
    init_sandbox(engine)
    db = SanDb(pg_scratch_url, engine, "postgres")
    save_scraps(engine, Dispatcher(), count=GHOST_SCRAPS, users=20)  # no announcements: all ghosts
    age_database(engine, timedelta(hours=1))
    ghosts = {job.id for job in db.jobs()}
    assert len(ghosts) == 2 * GHOST_SCRAPS

    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(3), context.Queue()
    settings = WorkerSettings(
        pg_scratch_url, "pg_notify", Faults(), backlog=True, backlog_newest_first=True
    )
    with WorkerPool(settings, 2) as pool:
        runs = [
            context.Process(target=recovery_process, args=(pg_scratch_url, barrier, results))
            for _ in range(2)
        ]
        for run in runs:
            run.start()
        barrier.wait(120)  # both runs have detected every ghost; now all write at once
        during = pool.drain(idle_s=1.0)
        reports = [results.get(timeout=180) for _ in runs]
        for run in runs:
            run.join(60)
        after = pool.drain(idle_s=1.0)  # the replacements, announced by pg_notify
    print(
        f"workers: {during.completed} completed during the runs ({during.not_claimed} lost the "
        "race), "
        f"{after.completed} replacements after; runs closed {[len(r[2]) for r in reports]}"
    )

    assert all(success for success, _, _ in reports)
    assert [detected for _, detected, _ in reports] == [
        2 * GHOST_SCRAPS
    ] * 2  # both saw every ghost
    closed = [job_id for _, _, ids in reports for job_id in ids]
    originals = {job.id: job for job in db.jobs() if job.id in ghosts}
    failed = {i for i, job in originals.items() if job.status == FAILED}
    completed = {i for i, job in originals.items() if job.status == COMPLETED}
    assert failed | completed == ghosts  # every ghost ended one way or the other
    assert sorted(closed) == sorted(failed)  # each closed exactly once across the two runs
    assert failed and completed  # the race really happened on both sides
    for job_id in failed:  # never claimed by a worker: recovery never failed a worker's job
        assert originals[job_id].started_at is None
        assert originals[job_id].error_message.startswith("batch_pipeline ghost-job recovery")
    for job_id in completed:
        assert db.jobs(retry_of_job_id=job_id) == []
    for job_id in failed:
        [replacement] = db.jobs(retry_of_job_id=job_id)
        assert replacement.status == COMPLETED
    with engine.connect() as conn:
        assert conn.execute(DUPLICATE_ACTIVE_JOBS).scalar_one() == 0
        assert (
            conn.execute(select(func.count(func.distinct(knowledge_cards.c.scrap_id)))).scalar_one()
            == GHOST_SCRAPS
        )
    assert db.count(knowledge_cards) == GHOST_SCRAPS
    engine.dispose()
