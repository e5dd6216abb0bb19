"""Unrefined scraps: refined_content IS NULL AND no active SCRAP_REFINE job
-> enqueue(SCRAP_REFINE).

This is the case nothing else covers: a SCRAP_REFINE job that vanished. A stuck one is a
ghost job; a re-scrapped source is re-enqueued by the app itself.
"""

from batch_pipeline.recovery.scrap_recovery import ScrapRecoveryRule, scrap_frame
from batch_pipeline.san.schema import SCRAP_REFINE, scraps

AREA = "orphan_scrap_refine_recovery"

is_unrefined = scraps.c.refined_content.is_(None)

UNREFINED_SCRAPS = ScrapRecoveryRule(
    area=AREA,
    job_type=SCRAP_REFINE,
    needs_work=is_unrefined,
    frame=scrap_frame("UnrefinedScraps", "Scraps with refined_content NULL and no active SCRAP_REFINE job."),
)
