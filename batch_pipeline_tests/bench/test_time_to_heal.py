"""The fast lane under the real daemon on the real clock: the sandbox's app loses events, its
AI fails and it dies before enqueueing, and `dagster-daemon` (fast_heal_sensor -> fast_heal_job)
heals every case before a generous deadline, with no duplicate active job. The percentiles are
printed; the targets themselves are measured by `python -m bench.time_to_heal`
(docs/reliability.md)."""

import pytest

from batch_pipeline.fast_lane.announcements import GRID
from batch_pipeline.san.database import create_san_engine
from batch_pipeline_tests.conftest import pg_admin_url
from bench.time_to_heal import ExperimentSettings, run_experiment
from san_sandbox.app_schema import init_sandbox
from san_sandbox.scratch import scratch_database

pytestmark = pytest.mark.system  # the time-to-heal experiment, under the daemon


@pytest.mark.timeout(1200)  # 2 min of saves, then up to 6 min to heal, plus the daemon's start
def test_every_lost_event_failed_call_and_app_death_heals_within_minutes_under_the_daemon(tmp_path):
    settings = ExperimentSettings(
        save_minutes=2, heal_deadline_minutes=6, scraps_per_minute=30, grace_minutes=1
    )
    with scratch_database(pg_admin_url(), prefix="san_tth_test") as url:
        engine = create_san_engine(url)
        init_sandbox(engine)
        figures = run_experiment(url, engine, settings, workdir=tmp_path / "experiment")
        engine.dispose()
    print(figures.report())
    causes = set(figures.heal_seconds["cause"])
    assert {"lost event", "failed AI call", "app death"} <= causes, causes  # the faults struck
    assert figures.unhealed.empty, figures.report()
    assert figures.max_active_per_target <= 1
    # the app's announcement + at most one per step of the grid
    assert figures.max_announcements_per_job <= 1 + len(GRID)
    assert figures.lane.runs >= 1 and figures.lane.requested_with_nothing_found == 0
    assert figures.lane.rounds >= 1  # the sensor re-announced lost events itself
    # every result healed long before recovery_job's 2-hourly cadence would have
    assert figures.heal_seconds["seconds"].max() < 6 * 60
