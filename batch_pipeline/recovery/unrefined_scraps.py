"""Unrefined scraps: refined_content IS NULL AND no active SCRAP_REFINE job
-> enqueue(SCRAP_REFINE).

This is the case nothing else covers: a SCRAP_REFINE job that vanished. A stuck one is a
ghost job; a re-scrapped source is re-enqueued by the app itself.
"""

from batch_pipeline.recovery.targets import TargetRecovery
from batch_pipeline.san.tables import SCRAP_REFINE, scraps

UNREFINED_SCRAPS = TargetRecovery(
    area="orphan_scrap_refine_recovery",
    name="unrefined_scraps",
    noun="unrefined scraps",
    table=scraps,
    job_type=SCRAP_REFINE,
    needs_work=scraps.c.refined_content.is_(None),
    needs_work_text="with refined_content NULL",
    done_text="refined (refined_content set)",
    id_key="scrap_id",
    frame_name="UnrefinedScraps",
    uses_scrap_lookback=True,
)
