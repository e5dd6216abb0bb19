"""recovery_job: runRecovery() -- the run_recovery graph: every recovery of the registry, one
after the other, each materializing its asset and evaluating its checks."""

from dagster import AssetSelection, define_asset_job, in_process_executor

from batch_pipeline.recovery.assets import run_recovery
from batch_pipeline.recovery.freshness import FRESHNESS_CHECK_KEYS
from batch_pipeline.recovery.registry import RECOVERIES

# dagster.yaml limits runs carrying this tag to one at a time (the code is safe if two overlap);
# run monitoring cancels a run that outlives dagster/max_runtime (seconds).
RECOVERY_TAGS = {"batch_pipeline/concurrency": "recovery_job", "dagster/max_runtime": "3600"}

recovery_job = define_asset_job(
    "recovery_job",
    # its assets and the checks its ops evaluate; the watchdog's freshness checks run apart
    selection=AssetSelection.assets(run_recovery) - AssetSelection.checks(*FRESHNESS_CHECK_KEYS),
    tags=RECOVERY_TAGS,
    # Its steps run one after the other anyway: in one process a run starts in seconds instead
    # of a process (and a code load) per step (docs/benchmarks.md, "Launch to success").
    executor_def=in_process_executor,
    description="Heal SAN's pipeline fragments, in this order: "
    + "; ".join(recovery.rule_text for recovery in RECOVERIES)
    + ".",
)
