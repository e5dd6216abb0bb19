"""The registry: every recovery once, the design's three first in the design's order, each an
obvious place in the tree with its test beside it."""

from pathlib import Path

from batch_pipeline.recovery.registry import AREAS, BY_AREA, RECOVERIES, TARGET_RECOVERIES
from batch_pipeline.recovery.targets import TargetRecovery

ROOT = Path(__file__).resolve().parents[2]


def test_the_designs_recoveries_run_first_in_the_designs_order_then_the_extensions():
    assert AREAS[:3] == (
        "ghost_job_recovery",
        "orphan_scrap_recovery",
        "orphan_scrap_refine_recovery",
    )
    extension = [recovery.extension for recovery in RECOVERIES]
    assert extension == sorted(extension)  # no extension before a design service


def test_each_recovery_is_one_declaration_with_unique_names():
    assert len(set(AREAS)) == len(AREAS) == len(BY_AREA)
    assert len({recovery.name for recovery in RECOVERIES}) == len(RECOVERIES)
    assert TARGET_RECOVERIES == tuple(r for r in RECOVERIES if isinstance(r, TargetRecovery))


def test_each_recovery_has_its_module_and_its_test_module():
    for recovery in RECOVERIES:
        assert (ROOT / "batch_pipeline" / "recovery" / f"{recovery.name}.py").exists()
        assert (ROOT / "batch_pipeline_tests" / "recovery" / f"test_{recovery.name}.py").exists()


def test_both_recovery_shapes_are_a_recovery_as_the_ops_know_it():
    from batch_pipeline.recovery.ghost_jobs import GhostJobRecovery
    from batch_pipeline.recovery.plan import Recovery
    from batch_pipeline.recovery.targets import TargetRecovery

    assert {type(recovery) for recovery in RECOVERIES} == {GhostJobRecovery, TargetRecovery}
    for recovery in RECOVERIES:
        assert isinstance(recovery, Recovery), recovery.area
        assert recovery.rule_text and recovery.detect_description and recovery.asset_description
