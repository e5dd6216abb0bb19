"""The TIL asset: `til_auto_generation`, one materialization per day partition and run (its
audit trail), backed by the graph `run_til_auto_generation` (the design's
runTilAutoGeneration()).

A graph-backed asset rather than an external one: its page's *Materialize* launches a day, the
03:00 schedule shows under its automations, and the catalog shows where its rows live (PostgreSQL).
"""

from dagster import (
    AssetOut,
    AssetsDefinition,
    DailyPartitionsDefinition,
    Nothing,
    graph_multi_asset,
)

from batch_pipeline.san.database import san_kinds
from batch_pipeline.san.ops import CHECK_NODE, graph_run_config, settings_mapping
from batch_pipeline.til.auto_generation import AREA
from batch_pipeline.til.config import TilConfig
from batch_pipeline.til.ops import check_san_database_for_til, create_daily_tils, detect_til_users

GROUP = "san_til"
GRAPH = "run_til_auto_generation"


def til_run_config(config: dict | None = None) -> dict:
    """A til_auto_generation_job run config: the TilConfig fields under
    ops.run_til_auto_generation.config."""
    return graph_run_config(GRAPH, config)


def til_asset(partitions: DailyPartitionsDefinition) -> AssetsDefinition:
    @graph_multi_asset(
        name=GRAPH,
        group_name=GROUP,
        partitions_def=partitions,
        outs={
            AREA: AssetOut(
                key=AREA,
                dagster_type=Nothing,
                is_required=False,  # a dry run materializes nothing
                kinds=san_kinds(),
                description="Daily TILs: for day D, a DailySummary and a TIL_GENERATION job per "
                "user with cards from D. Metadata: active users, summaries and jobs created "
                "(with ids), users still waiting for cards, and D's bounds in UTC.",
            )
        },
        # The Launchpad takes every setting once, as ops.run_til_auto_generation.config.
        config=settings_mapping(TilConfig),
    )
    def run_til_auto_generation():
        settings = check_san_database_for_til.alias(CHECK_NODE)()
        return {AREA: create_daily_tils(settings, detect_til_users(settings))}

    return run_til_auto_generation
