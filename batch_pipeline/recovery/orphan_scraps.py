"""Orphan scraps: no knowledge card AND no active (PENDING/PROCESSING) CARD_ANALYSIS job
-> enqueue(CARD_ANALYSIS).

Scraps that do have an active CARD_ANALYSIS job belong to ghost-job recovery. A card whose
embedding is NULL does not occur in the current pipeline and is not handled.
"""

from sqlalchemy import ColumnElement, exists, literal, select

from batch_pipeline.recovery.targets import TargetRecovery
from batch_pipeline.san.sweep import Bound
from batch_pipeline.san.tables import CARD_ANALYSIS, knowledge_cards, scraps

has_no_card = ~exists().where(knowledge_cards.c.scrap_id == scraps.c.id)
# The same, probed per scrap (a scalar subquery is never turned into a hash of all cards).
has_no_card_probe = (
    select(literal(1))
    .where(knowledge_cards.c.scrap_id == scraps.c.id)
    .limit(1)
    .scalar_subquery()
    .is_(None)
)


def has_no_card_between(after: Bound, upto: Bound) -> ColumnElement:
    """has_no_card for scraps with ids in (after, upto]: the cards of that range only."""
    return ~exists().where(
        knowledge_cards.c.scrap_id == scraps.c.id,
        knowledge_cards.c.scrap_id > after,
        knowledge_cards.c.scrap_id <= upto,
    )


ORPHAN_SCRAPS = TargetRecovery(
    area="orphan_scrap_recovery",
    name="orphan_scraps",
    noun="orphan scraps",
    table=scraps,
    job_type=CARD_ANALYSIS,
    needs_work=has_no_card,
    needs_work_text="with no knowledge card",
    done_text="has its knowledge card",
    id_key="scrap_id",
    frame_name="OrphanScraps",
    uses_scrap_lookback=True,
    needs_work_per_row=has_no_card_probe,
    needs_work_between=has_no_card_between,
    # The full sweep's anti-join hashes every card's scrap_id, which spills to disk at SAN's
    # size; merging the two key indexes in id order needs no hash (docs/benchmarks.md, "Third
    # round"). Both are the app's own; only the job probes need ix_san_jobs_target.
    full_sweep_prefers=("ix_san_jobs_target",),
)
