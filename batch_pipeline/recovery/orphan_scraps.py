"""Orphan scraps: no knowledge card AND no active (PENDING/PROCESSING) CARD_ANALYSIS job
-> enqueue(CARD_ANALYSIS).

Scraps that do have an active CARD_ANALYSIS job belong to ghost-job recovery. A card whose
embedding is NULL does not occur in the current pipeline and is not handled.
"""

from sqlalchemy import exists, literal, select

from batch_pipeline.recovery.scrap_recovery import ScrapRecoveryRule, scrap_frame
from batch_pipeline.san.schema import CARD_ANALYSIS, knowledge_cards, scraps

AREA = "orphan_scrap_recovery"

has_no_card = ~exists().where(knowledge_cards.c.scrap_id == scraps.c.id)
# The same, probed per scrap (a scalar subquery is never turned into a hash of all cards).
has_no_card_probe = (
    select(literal(1)).where(knowledge_cards.c.scrap_id == scraps.c.id).limit(1).scalar_subquery().is_(None)
)

ORPHAN_SCRAPS = ScrapRecoveryRule(
    area=AREA,
    job_type=CARD_ANALYSIS,
    needs_work=has_no_card,
    needs_work_per_row=has_no_card_probe,
    # The full sweep's anti-join: PostgreSQL hashes every card's scrap_id, which spills to
    # disk at SAN's size (2 M ids at scale 1); merging the two primary/unique key indexes in
    # id order needs no hash (detect_orphan_scraps 1.92 -> 1.36 s at scale 1, docs/benchmarks.md).
    # Both are the app's own; only the per-candidate job probes need ix_san_jobs_target.
    full_sweep_prefers=("ix_san_jobs_target",),
    frame=scrap_frame("OrphanScraps", "Scraps with no knowledge card and no active CARD_ANALYSIS job."),
)
