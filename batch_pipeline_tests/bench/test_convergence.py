"""Convergence under chaos: a faulty SAN pipeline heals, cycle after cycle.

On PostgreSQL with 4 worker processes (pg_notify), 2,000 scraps from 200 users and the faults of
docs/reliability.md's convergence experiment; and a smaller run on SQLite with polling workers.
`-s` shows the table per cycle. And its command, `python -m bench.convergence`.
"""

from itertools import pairwise

import pytest

from batch_pipeline.recovery.orphan_scraps import ORPHAN_SCRAPS
from batch_pipeline.recovery.unrefined_scraps import UNREFINED_SCRAPS
from batch_pipeline.san.tables import CARD_ANALYSIS, SCRAP_REFINE
from batch_pipeline_tests.bench.conftest import pg_server_url
from bench.convergence import main, run_convergence
from san_sandbox.faults import Faults

pytestmark = pytest.mark.system  # the convergence experiment

MAX_ATTEMPTS = 20
MARGIN = 1.25  # the measured unmet count may exceed the prediction by 25 % (+5): sampling noise


def assert_converged(result, workers_saw_faults=True):
    print(result.table())
    cycles = result.cycles
    assert result.converged, "still changing after the last cycle"

    # every healthy scrap ends refined with exactly one card
    assert result.healthy_scraps_done == result.healthy_scraps
    assert result.cards_per_scrap_max == 1

    # the unmet count falls at least as fast as the failure rate predicts, and never rises
    for cycle in cycles:
        assert cycle.needs_after <= cycle.expected_after * MARGIN + 5, cycle
    for previous, cycle in pairwise(cycles):
        assert cycle.needs_after <= previous.needs_after, cycle
    assert cycles[0].needs_after > 0  # the faults really struck

    # never two active jobs for one (job_type, target_id), after any cycle
    assert all(cycle.duplicates == 0 for cycle in cycles)

    # the audit trail names exactly the rows each run changed
    assert [c.audit_mismatches for c in cycles if c.audit_mismatches] == []

    # poison: exactly max_attempts jobs per job type, and reported exhausted by both scrap areas
    assert result.poison_scrap_ids
    for scrap_id in result.poison_scrap_ids:
        for job_type in (SCRAP_REFINE, CARD_ANALYSIS):
            assert result.poison_jobs[(job_type, scrap_id)] == MAX_ATTEMPTS, (job_type, scrap_id)
    final = cycles[-1].exhausted
    assert set(result.poison_scrap_ids) <= set(final[ORPHAN_SCRAPS.area])
    assert set(result.poison_scrap_ids) <= set(final[UNREFINED_SCRAPS.area])

    # the TIL partition: one new summary per active user of the day, each with a completed job
    til = result.til
    assert til.active_users and set(til.summaries_per_user) == til.active_users
    assert set(til.summaries_per_user.values()) == {1}
    # every summary got its TIL
    assert til.written == til.summaries_created == len(til.active_users)
    # and almost every one a COMPLETED job
    assert til.jobs_completed >= til.written - til.ai_failures
    assert til.duplicates == 0
    # AI failures struck the TIL jobs too, and til_generation_recovery (the fifth) healed them
    assert til.ai_failures > 0 and til.recovered > 0
    assert til.audit_mismatches == []
    if workers_saw_faults:
        assert sum(c.worker.late_results for c in cycles) > 0  # slow workers really finished late


def test_the_pipeline_converges_under_chaos_on_postgres(pg_scratch_url):
    result = run_convergence(
        pg_scratch_url,
        scraps_to_save=2_000,
        users=200,
        workers=4,
        faults=Faults.convergence_rates(seed=1),
        max_attempts=MAX_ATTEMPTS,
        dispatcher="pg_notify",
    )
    assert result.app_deaths > 50 and len(result.poison_scrap_ids) > 5  # the app-side faults struck
    assert_converged(result)


def test_the_pipeline_converges_under_chaos_on_sqlite_with_polling_workers(tmp_path):
    result = run_convergence(
        f"sqlite:///{tmp_path / 'sandbox.sqlite'}",
        scraps_to_save=300,
        users=30,
        workers=2,
        faults=Faults.convergence_rates(seed=2).model_copy(update={"poison": 0.02}),
        max_attempts=MAX_ATTEMPTS,
        dispatcher="none",
    )
    assert_converged(result)


def test_converge_prints_the_table_and_a_summary_line(capsys):
    code = main(
        [
            "--server-url",
            pg_server_url(),
            "--scraps",
            "60",
            "--users",
            "6",
            "--workers",
            "2",
            "--poison",
            "0",
            "--seed",
            "4",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "| cycle | unmet before |" in out
    summary = out.strip().splitlines()[-1]
    assert (
        "converged=True" in summary
        and "healthy_done=60/60" in summary
        and "duplicates=0" in summary
    )
    assert "audit_mismatches=0" in summary and "max_cards_per_scrap=1" in summary
