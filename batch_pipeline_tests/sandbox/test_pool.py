"""Several reference workers, each in its own process, driven phase by phase."""

from batch_pipeline.san.dispatch import build_dispatcher
from batch_pipeline.san.tables import CARD_ANALYSIS, COMPLETED, PENDING
from san_sandbox.app import save_scraps
from san_sandbox.faults import Faults
from san_sandbox.pool import WorkerPool, WorkerSettings


def test_a_pool_drains_what_it_heard_and_runs_each_job_once(sandbox):
    settings = WorkerSettings(sandbox.url, "none", Faults())
    with WorkerPool(settings, 2) as pool:
        dispatcher = build_dispatcher("none", sandbox.engine.dialect.name, "")
        saved = save_scraps(sandbox.engine, dispatcher, count=5, users=2)
        stats = pool.drain(idle_s=1.0)
    assert saved.scraps == 5 and stats.completed == 10  # a refinement and a card each
    assert len(sandbox.jobs(status=COMPLETED)) == 10 and sandbox.jobs(status=PENDING) == []
    assert len(sandbox.jobs(job_type=CARD_ANALYSIS)) == 5
