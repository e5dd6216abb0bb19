"""Unwritten TILs (batch_pipeline's extension of the design): a daily summary whose content is
still NULL AND no active TIL_GENERATION job -> enqueue(TIL_GENERATION).

The design heals every other fragment but this one: a TIL_GENERATION job that FAILED (an AI
error) or vanished leaves the user's summary empty forever. A stuck one is a ghost job. The
grace (orphan_min_age_minutes) leaves summaries alone whose job the app may still be creating.
"""

from batch_pipeline.recovery.targets import TargetRecovery
from batch_pipeline.san.tables import TIL_GENERATION, daily_summaries

UNWRITTEN_TILS = TargetRecovery(
    area="til_generation_recovery",
    name="unwritten_tils",
    noun="unwritten TILs",
    table=daily_summaries,
    job_type=TIL_GENERATION,
    needs_work=daily_summaries.c.content.is_(None),
    needs_work_text="with content NULL",
    done_text="written (content set)",
    id_key="summary_id",
    frame_name="UnwrittenTils",
    extension=True,
)
