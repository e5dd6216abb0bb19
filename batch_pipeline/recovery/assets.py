"""The recovery assets: one graph-backed multi-asset, `run_recovery` (the design's
runRecovery()), whose op graph runs every recovery of the registry in order. Each recover op
materializes its area's asset (the audit trail) and evaluates its checks in the same run.

Why this shape (Dagster 1.13): the design's op graph and typed frames stay as they are
(detect -> re-enqueue per area, fixed order, one job), while the UI gets real assets
(Materialize works, the schedule shows under the asset's automations) with checks evaluated in
the run that produced them, not in a second run a sensor launches.
"""

from dagster import AssetOut, Nothing, graph_multi_asset

from batch_pipeline.recovery import checks
from batch_pipeline.recovery.config import RecoveryConfig
from batch_pipeline.recovery.ops import RECOVERY_OPS, check_recovery_health, check_san_database
from batch_pipeline.recovery.registry import RECOVERIES
from batch_pipeline.san.database import san_kinds
from batch_pipeline.san.ops import graph_run_config, settings_mapping

GROUP = "san_recovery"
GRAPH = "run_recovery"


def recovery_run_config(config: dict | None = None) -> dict:
    """A recovery_job run config: the RecoveryConfig fields under ops.run_recovery.config."""
    return graph_run_config(GRAPH, config)


def step_key(op_name: str) -> str:
    """The step key of one of the graph's ops, as run logs and events name it."""
    return f"{GRAPH}.{op_name}"


@graph_multi_asset(
    name=GRAPH,
    group_name=GROUP,
    outs={
        recovery.name: AssetOut(
            key=recovery.area,
            kinds=san_kinds(),
            description=recovery.asset_description,
            dagster_type=Nothing,
            is_required=False,
        )
        for recovery in RECOVERIES
    },
    check_specs=list(checks.RECOVERY_CHECKS),
    # The Launchpad takes every setting once, as ops.run_recovery.config.
    config=settings_mapping(RecoveryConfig),
)
def run_recovery():
    settings = check_san_database()
    outputs, done = {}, None
    for recovery in RECOVERIES:  # in the registry's order: each detection after the previous writes
        detect, recover = RECOVERY_OPS[recovery.area]
        candidates = detect(settings) if done is None else detect(settings, after=done)
        written = recover(settings, candidates)
        done = written.done
        outputs[recovery.name] = getattr(written, recovery.name)
        for spec in checks.area_checks(recovery.area):
            outputs[checks.output_name(spec)] = getattr(written, checks.output_name(spec))
    health = check_recovery_health(settings, after=done)
    for spec in checks.DATABASE_CHECKS:
        outputs[checks.output_name(spec)] = getattr(health, checks.output_name(spec))
    return outputs


recovery_assets = [run_recovery]
