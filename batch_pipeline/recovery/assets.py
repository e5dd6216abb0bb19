"""The audit-trail assets: each re-enqueue op materializes one of them per run."""

from dagster import AssetSpec

from batch_pipeline.recovery import ghost_jobs, orphan_scraps, unrefined_scraps

GROUP = "san_recovery"

recovery_assets = [
    AssetSpec(
        ghost_jobs.AREA,
        group_name=GROUP,
        description="Ghost jobs closed as FAILED (PENDING > 30 min, PROCESSING > 1 h) and their "
        "replacement jobs. Metadata: counts per run and the failed -> new job id pairs.",
    ),
    AssetSpec(
        orphan_scraps.AREA,
        group_name=GROUP,
        description="Scraps with no knowledge card and no active CARD_ANALYSIS job, re-enqueued "
        "for CARD_ANALYSIS. Metadata: counts per run and the scrap -> new job ids.",
    ),
    AssetSpec(
        unrefined_scraps.AREA,
        group_name=GROUP,
        description="Scraps never AI-refined (refined_content NULL, no active SCRAP_REFINE job), "
        "re-enqueued for SCRAP_REFINE. Metadata: counts per run and the scrap -> new job ids.",
    ),
]
