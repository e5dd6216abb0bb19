"""The fast lane's assets: what each fast-heal run did, as materializations the UI lists and plots.

One op (`fast_heal`) materializes both: a fast-heal run is a single step, so it launches and
finishes in seconds (jobs.py runs it in process).
"""

from dagster import AssetObservation, AssetOut, OpExecutionContext, Output, multi_asset

from batch_pipeline.fast_lane.config import FastHealConfig
from batch_pipeline.fast_lane.rules import (
    due_announcements,
    due_retries,
    reannounce,
    retries_metadata,
    retry,
)
from batch_pipeline.recovery.ops import audited_across_attempts
from batch_pipeline.recovery.registry import TARGET_RECOVERIES
from batch_pipeline.san.database import database_now, read_transaction
from batch_pipeline.san.ops import (
    DATABASE_RETRY,
    as_metadata,
    retried_only_if_transient,
    warn_about_unannounced_jobs,
)
from batch_pipeline.san.resources import JobDispatcherResource, SanDatabase

REANNOUNCEMENTS_ASSET = "fast_lane_reannouncements"
RETRIES_ASSET = "fast_lane_retries"
GROUP = "san_fast_lane"


@multi_asset(
    name="fast_heal",
    group_name=GROUP,
    outs={
        REANNOUNCEMENTS_ASSET: AssetOut(
            is_required=False,
            description="PENDING jobs no worker claimed, announced again at 1, 2, 4, 8, 16 min of "
            "age (same job id, row unchanged). Metadata: counts, the announced job ids, how long "
            "they had waited.",
        ),
        RETRIES_ASSET: AssetOut(
            is_required=False,
            description="Targets whose latest attempt failed (after a backoff of 1, 2, 4 ... min) "
            "or that never got "
            "a job (past the grace), enqueued between recovery_job's runs. Metadata: counts per "
            "area, target -> "
            "new job ids, how long they had waited.",
        ),
    },
    retry_policy=DATABASE_RETRY,
    description="Heal within minutes what recovery_job would heal at its next run; requested by "
    "fast_heal_sensor.",
)
def fast_heal(
    context: OpExecutionContext,
    config: FastHealConfig,
    san_database: SanDatabase,
    job_dispatcher: JobDispatcherResource,
):
    engine = san_database.open_verified(config.write_limits)
    dispatcher = job_dispatcher.for_database(engine)
    settings = config.settings(announcing=dispatcher.kind != "none")
    with retried_only_if_transient():
        with read_transaction(engine, config.write_limits) as conn:
            now = database_now(conn)
            window = config.window(now)
            unclaimed = due_announcements(conn, window, settings)
            due = {
                recovery.area: due_retries(conn, recovery, now, settings)
                for recovery in TARGET_RECOVERIES
            }
        announced = (
            reannounce(engine, dispatcher, unclaimed, now, config.write_limits)
            if not config.dry_run
            else None
        )
        # the retry detects anew: the targets an earlier attempt healed are not candidates again
        reports = audited_across_attempts(
            context,
            RETRIES_ASSET,
            TARGET_RECOVERIES,
            lambda recovery: retry(engine, dispatcher, recovery, due[recovery.area], now, settings),
            same_candidates=False,
        )
    retried = retries_metadata(reports)
    context.log.info(
        f"window {window.since.isoformat()} .. {window.until.isoformat()}: {len(unclaimed)} "
        "unclaimed jobs"
        + (f", {announced.announced} announced again" if announced else "")
        + f"; {retried['enqueued']} targets enqueued ("
        + ", ".join(f"{area} {counts['enqueued']}" for area, counts in retried["by_area"].items())
        + ")"
        + (" (dry run: nothing written or announced)" if config.dry_run else "")
    )
    warn_about_unannounced_jobs(context, RETRIES_ASSET, retried["announce_failures"])
    if config.dry_run:
        context.log_event(AssetObservation(asset_key=RETRIES_ASSET, metadata=as_metadata(retried)))
        return
    window_metadata = {
        "window_since": window.since.isoformat(),
        "window_until": window.until.isoformat(),
    }
    yield Output(
        None,
        REANNOUNCEMENTS_ASSET,
        metadata=as_metadata({**announced.metadata(), **window_metadata}),
    )
    yield Output(None, RETRIES_ASSET, metadata=as_metadata(retried))
