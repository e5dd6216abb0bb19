"""recovery_job: runRecovery() -- every recovery of the registry, one after the other."""

from dagster import AssetSelection, define_asset_job, job

from batch_pipeline.recovery.checks import recovery_checks
from batch_pipeline.recovery.ops import RECOVERY_OPS, check_san_database
from batch_pipeline.recovery.registry import RECOVERIES

# dagster.yaml limits runs carrying this tag to one at a time (the code is safe if two overlap);
# run monitoring cancels a run that outlives dagster/max_runtime (seconds).
RECOVERY_TAGS = {"batch_pipeline/concurrency": "recovery_job", "dagster/max_runtime": "3600"}


@job(
    tags=RECOVERY_TAGS,
    description="Heal SAN's pipeline fragments, in this order: "
    + "; ".join(recovery.rule_text for recovery in RECOVERIES) + ".",
)
def recovery_job():
    settings = check_san_database()
    done = None
    for recovery in RECOVERIES:  # in the registry's order: each detection after the previous writes
        detect, recover = RECOVERY_OPS[recovery.area]
        candidates = detect(settings) if done is None else detect(settings, after=done)
        done = recover(settings, candidates)


# The recovery assets' checks, run by recovery/sensors.py after every recovery run.
recovery_checks_job = define_asset_job(
    "recovery_checks_job",
    selection=AssetSelection.checks(*recovery_checks),
    description="Asset checks of the recovery assets: backlog, exhausted targets, deferred work, indexes.",
)
