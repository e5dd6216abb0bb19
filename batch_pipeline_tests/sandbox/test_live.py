"""The living sandbox behind `make run`: scraps keep arriving, the worker keeps working and
failing, the clock runs fast, and a recovery run then finds real work."""

import pytest
from dagster import DagsterInstance
from sqlalchemy import func, select

from batch_pipeline.san.resources import SanDatabase
from batch_pipeline.san.tables import COMPLETED, jobs, scraps
from batch_pipeline_tests.conftest import SanDb
from batch_pipeline_tests.runs import run_recovery
from bench.convergence import latest_audit
from san_sandbox.app_schema import NotASandbox
from san_sandbox.demo import seed_demo_state
from san_sandbox.faults import Faults
from san_sandbox.live import LiveSettings, run_live


def test_a_living_sandbox_keeps_saving_working_and_failing_and_recovery_heals_it(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("SAN_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("SAN_DATABASE_URL", raising=False)
    embedded = SanDatabase()
    engine = embedded.get_engine()  # the embedded default, seeded as `make run` seeds it
    seed_demo_state(engine)
    with engine.connect() as conn:
        seeded = conn.execute(select(func.count()).select_from(scraps)).scalar_one()

    faults = Faults(
        event_lost=0.3, worker_dies_mid_job=0.2, ai_fails=0.2, app_dies_before_enqueue=0.2, seed=5
    )
    stats = run_live(
        engine,
        LiveSettings(tick_s=0.3, scraps_per_tick=5, san_minutes_per_tick=20, faults=faults),
        ticks=8,
        report=print,
    )

    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(scraps)).scalar_one() == seeded + 40
    assert stats.completed > 10 and stats.failed > 0 and stats.died > 0 and stats.lost_events > 0
    db = SanDb(f"sqlite:///{tmp_path / 'san.sqlite'}", engine, "sqlite")
    assert len(db.jobs(status=COMPLETED)) > 10

    instance = DagsterInstance.ephemeral()
    result, _ = run_recovery(db, instance=instance)
    assert result.success
    assert latest_audit(instance, "ghost_job_recovery")["enqueued"] > 0  # lost events, dead workers
    # app deaths, AI failures
    assert latest_audit(instance, "orphan_scrap_recovery")["enqueued"] > 0
    embedded.teardown_after_execution(None)


def test_the_living_sandbox_refuses_a_real_database(san_db):
    san_db.scrap(san_db.user())
    with pytest.raises(NotASandbox):
        run_live(san_db.engine, ticks=1)
    assert san_db.count(jobs) == 0
