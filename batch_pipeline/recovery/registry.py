"""Every recovery of recovery_job, in the order it runs them: the one list that the ops, the job
graph, the assets, the checks, the sandbox's figures and the benchmark iterate.

The design's three (GhostJobRecovery, OrphanScrapRecoveryService,
OrphanScrapRefineRecoveryService) run first, in the design's order; then batch_pipeline's
extensions. Adding a recovery: a declaration module (a TargetRecovery, see targets.py), one
line here, its test file, a README row.
"""

from batch_pipeline.recovery.ghost_jobs import GHOST_JOB_RECOVERY
from batch_pipeline.recovery.orphan_scraps import ORPHAN_SCRAPS
from batch_pipeline.recovery.plan import Recovery
from batch_pipeline.recovery.targets import TargetRecovery
from batch_pipeline.recovery.unrefined_scraps import UNREFINED_SCRAPS
from batch_pipeline.recovery.unwritten_tils import UNWRITTEN_TILS

RECOVERIES: tuple[Recovery, ...] = (
    GHOST_JOB_RECOVERY,
    # Orphan detection starts only after ghosts are re-enqueued: a scrap whose stuck job was
    # just replaced has an active job again and is left to it. Likewise for the others.
    ORPHAN_SCRAPS,
    UNREFINED_SCRAPS,
    UNWRITTEN_TILS,
)

AREAS = tuple(recovery.area for recovery in RECOVERIES)
BY_AREA = {recovery.area: recovery for recovery in RECOVERIES}
# The "target needs work + no active job" recoveries: the fast lane retries their targets.
TARGET_RECOVERIES = tuple(
    recovery for recovery in RECOVERIES if isinstance(recovery, TargetRecovery)
)
