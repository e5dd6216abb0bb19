"""recovery_job: runRecovery() -- ghost jobs, then orphan scraps, then unrefined scraps."""

from dagster import job

from batch_pipeline.recovery.ops import (
    check_san_database,
    detect_ghost_jobs,
    detect_orphan_scraps,
    detect_unrefined_scraps,
    recover_ghost_jobs,
    recover_orphan_scraps,
    recover_unrefined_scraps,
)

# dagster.yaml limits runs carrying this tag to one at a time (the code is safe if two overlap).
RECOVERY_CONCURRENCY_TAG = {"batch_pipeline/concurrency": "recovery_job"}


@job(tags=RECOVERY_CONCURRENCY_TAG, description="Heal SAN's pipeline fragments: ghost jobs, orphan scraps, unrefined scraps.")
def recovery_job():
    settings = check_san_database()
    ghosts_done = recover_ghost_jobs(settings, detect_ghost_jobs(settings))
    # Orphan detection starts only after ghosts are re-enqueued: a scrap whose stuck job was just
    # replaced has an active job again and is left to it.
    orphans_done = recover_orphan_scraps(settings, detect_orphan_scraps(settings, after=ghosts_done))
    recover_unrefined_scraps(settings, detect_unrefined_scraps(settings, after=orphans_done))
