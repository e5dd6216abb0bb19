"""The TIL audit asset: one materialization per day partition and run."""

from dagster import AssetSpec, DailyPartitionsDefinition

from batch_pipeline.til.auto_generation import AREA


def til_asset(partitions: DailyPartitionsDefinition) -> AssetSpec:
    return AssetSpec(
        AREA,
        group_name="san_til",
        partitions_def=partitions,
        description="Daily TILs: for day D, a DailySummary and a TIL_GENERATION job per user with "
        "cards "
        "from D. Metadata: active users, summaries and jobs created (with ids), users still "
        "waiting "
        "for cards, and D's bounds in UTC.",
    )
