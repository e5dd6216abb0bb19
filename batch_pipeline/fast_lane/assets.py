"""The fast lane's assets: what it healed, as materializations the UI lists and plots.

- fast_lane_reannouncements: reported by fast_heal_sensor itself (a re-announcement changes no
  row, so it needs no run): one materialization per tick that announced something.
- fast_lane_retries: materialized by fast_heal_job's one op (`fast_heal`), a single step, so a
  run launches and finishes in seconds (jobs.py runs it in process).
"""

from dagster import (
    AssetExecutionContext,
    AssetObservation,
    AssetOut,
    AssetSpec,
    Output,
    multi_asset,
)

from batch_pipeline.fast_lane.announcements import GRID, MAX_ANNOUNCEMENTS_PER_TICK, claim_stats
from batch_pipeline.fast_lane.config import FastHealConfig
from batch_pipeline.fast_lane.retries import (
    HEALTHY_RETRY_CEILING,
    RETRY_BACKOFF_CEILING,
    due_retries,
    retries_metadata,
)
from batch_pipeline.recovery.ops import audited_across_attempts
from batch_pipeline.recovery.registry import TARGET_RECOVERIES
from batch_pipeline.recovery.target_writes import recover_targets
from batch_pipeline.san.database import database_now, read_transaction, san_kinds
from batch_pipeline.san.durations import in_words
from batch_pipeline.san.ops import (
    as_metadata,
    retried_on_error,
    retried_only_if_transient,
    warn_about_unannounced_jobs,
)
from batch_pipeline.san.resources import JobDispatcherResource, SanDatabase

REANNOUNCEMENTS_ASSET = "fast_lane_reannouncements"
RETRIES_ASSET = "fast_lane_retries"
GROUP = "san_fast_lane"

reannouncements = AssetSpec(
    REANNOUNCEMENTS_ASSET,
    group_name=GROUP,
    kinds=san_kinds(),
    description="PENDING jobs no worker claimed, announced again by fast_heal_sensor (same job id, "
    "row unchanged) when their age crosses a step of "
    + ", ".join(in_words(step) for step in GRID)
    + " from the threshold on (2 x the workers' recent claim latency p99, at least "
    f"{in_words(GRID[0])}). At most {MAX_ANNOUNCEMENTS_PER_TICK:,} a tick; the rest the next "
    "ticks. Metadata: counts, the announced job ids, how long they had waited, the threshold.",
)


@multi_asset(
    name="fast_heal",
    group_name=GROUP,
    outs={
        RETRIES_ASSET: AssetOut(
            is_required=False,
            kinds=san_kinds(),
            description="Targets whose latest attempt failed (after a jittered backoff that "
            f"doubles up to {in_words(RETRY_BACKOFF_CEILING)}, at most "
            f"{in_words(HEALTHY_RETRY_CEILING)} once the AI service works again) or that never "
            "got a job (past the grace), enqueued between recovery_job's runs. Metadata: counts "
            "per area, target -> new job ids, how long they had waited.",
        ),
    },
    description="Heal within seconds what recovery_job would heal at its next run; requested by "
    "fast_heal_sensor.",
)
@retried_on_error
def fast_heal(
    context: AssetExecutionContext,
    config: FastHealConfig,
    san_database: SanDatabase,
    job_dispatcher: JobDispatcherResource,
):
    engine = san_database.open_verified(config.write_limits)
    dispatcher = job_dispatcher.for_database(engine)
    settings = config.lane_settings()
    with retried_only_if_transient():
        with read_transaction(engine, config.write_limits) as conn:
            now = database_now(conn)
            last_success = claim_stats(conn, now).last_success
            due = {
                recovery.area: due_retries(
                    conn,
                    recovery,
                    now,
                    grace=settings.grace,
                    max_attempts=settings.max_attempts,
                    last_success=last_success,
                    retry_after=settings.retry_after,
                )
                for recovery in TARGET_RECOVERIES
            }
        thresholds = {
            "retry_after_seconds": config.retry_after_seconds,
            "orphan_min_age_minutes": config.orphan_min_age_minutes,
        }
        # the retry detects anew: the targets an earlier attempt healed are not candidates again
        reports = audited_across_attempts(
            context.op_execution_context,
            RETRIES_ASSET,
            TARGET_RECOVERIES,
            lambda recovery: recover_targets(
                engine,
                dispatcher,
                recovery,
                due[recovery.area],
                now=now,
                policy=config.policy,
                thresholds=thresholds,
            ),
            same_candidates=False,
        )
    retried = retries_metadata(reports)
    context.log.info(
        f"{retried['enqueued']} targets enqueued ("
        + ", ".join(f"{area} {counts['enqueued']}" for area, counts in retried["by_area"].items())
        + ")"
        + (" (dry run: nothing written)" if config.dry_run else "")
    )
    warn_about_unannounced_jobs(context, RETRIES_ASSET, retried["announce_failures"])
    if config.dry_run:
        context.log_event(AssetObservation(asset_key=RETRIES_ASSET, metadata=as_metadata(retried)))
        return
    yield Output(None, RETRIES_ASSET, metadata=as_metadata(retried))
