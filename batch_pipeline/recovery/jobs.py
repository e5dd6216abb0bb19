"""recovery_job: runRecovery() -- ghost jobs, then orphan scraps, then unrefined scraps."""

from dagster import AssetSelection, define_asset_job, job

from batch_pipeline.recovery.checks import recovery_checks
from batch_pipeline.recovery.ops import (
    check_san_database,
    detect_ghost_jobs,
    detect_orphan_scraps,
    detect_unrefined_scraps,
    recover_ghost_jobs,
    recover_orphan_scraps,
    recover_unrefined_scraps,
)

# dagster.yaml limits runs carrying this tag to one at a time (the code is safe if two overlap);
# run monitoring cancels a run that outlives dagster/max_runtime (seconds).
RECOVERY_TAGS = {"batch_pipeline/concurrency": "recovery_job", "dagster/max_runtime": "3600"}


@job(tags=RECOVERY_TAGS, description="Heal SAN's pipeline fragments: ghost jobs, orphan scraps, unrefined scraps.")
def recovery_job():
    settings = check_san_database()
    ghosts_done = recover_ghost_jobs(settings, detect_ghost_jobs(settings))
    # Orphan detection starts only after ghosts are re-enqueued: a scrap whose stuck job was just
    # replaced has an active job again and is left to it.
    orphans_done = recover_orphan_scraps(settings, detect_orphan_scraps(settings, after=ghosts_done))
    recover_unrefined_scraps(settings, detect_unrefined_scraps(settings, after=orphans_done))


# The recovery assets' checks, run by recovery/sensors.py after every recovery run.
recovery_checks_job = define_asset_job(
    "recovery_checks_job",
    selection=AssetSelection.checks(*recovery_checks),
    description="Asset checks of the recovery assets: backlog, exhausted targets, deferred work, indexes.",
)
