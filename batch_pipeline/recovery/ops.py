"""Dagster ops of recovery_job: thin wrappers over the plain functions of each area.

The run config is given once, to `check_san_database` (san/ops.py), which validates it and
passes it on to every other op as the `settings` input.
"""

from dagster import AssetMaterialization, In, Nothing, OpExecutionContext, Out, op

from batch_pipeline.recovery import ghost_jobs
from batch_pipeline.recovery.config import RecoveryConfig
from batch_pipeline.recovery.orphan_scraps import ORPHAN_SCRAPS
from batch_pipeline.recovery.plan import RecoveryReport
from batch_pipeline.recovery.scrap_recovery import ScrapRecoveryRule, detect_scraps, recover_scraps
from batch_pipeline.recovery.unrefined_scraps import UNREFINED_SCRAPS
from batch_pipeline.san.database import read_transaction, utc_now
from batch_pipeline.san.memory import paused_gc
from batch_pipeline.san.ops import DATABASE_RETRY, as_metadata, san_database_check_op, warn_about_unannounced_jobs
from batch_pipeline.san.resources import JobDispatcherResource, SanDatabase

GhostJobsType = ghost_jobs.GHOST_JOBS.dagster_type()


def record_audit(context: OpExecutionContext, report: RecoveryReport) -> None:
    """The audit trail: one materialization per area and run, zeros included."""
    context.log_event(AssetMaterialization(asset_key=report.area, metadata=as_metadata(report.metadata())))
    context.log.info(
        f"{report.area}: detected {report.detected}, enqueued {report.enqueued}, exhausted "
        f"{report.exhausted}, deferred {report.deferred}, skipped by race {report.skipped_by_race}"
        + (" (dry run: nothing written)" if report.dry_run else "")
    )
    warn_about_unannounced_jobs(context, report.area, report.announce_failures)


check_san_database = san_database_check_op(RecoveryConfig, "check_san_database")


@op(out=Out(GhostJobsType), retry_policy=DATABASE_RETRY, description=ghost_jobs.__doc__)
def detect_ghost_jobs(settings: RecoveryConfig, san_database: SanDatabase):
    rule = ghost_jobs.GhostRule(utc_now(), settings.stale_pending_after, settings.stale_processing_after)
    with paused_gc(), read_transaction(san_database.get_engine(), settings.write_limits) as conn:
        return ghost_jobs.detect_ghost_jobs(conn, rule)


@op(
    ins={"ghosts": In(GhostJobsType)},
    out=Out(Nothing),
    retry_policy=DATABASE_RETRY,
    description="Close each ghost as FAILED and enqueue its replacement, in one transaction per batch.",
)
def recover_ghost_jobs(
    context: OpExecutionContext, settings: RecoveryConfig, ghosts, san_database: SanDatabase,
    job_dispatcher: JobDispatcherResource,
):
    engine = san_database.get_engine()
    with paused_gc():
        report = ghost_jobs.recover_ghost_jobs(
            engine,
            job_dispatcher.for_database(engine),
            ghosts,
            ghost_jobs.GhostRule(utc_now(), settings.stale_pending_after, settings.stale_processing_after),
            settings.policy,
        )
    record_audit(context, report)


def scrap_recovery_ops(rule: ScrapRecoveryRule, name: str, description: str):
    """The detect and re-enqueue ops of one scrap recovery (orphan or unrefined)."""
    frame_type = rule.frame.dagster_type()

    @op(
        name=f"detect_{name}",
        ins={"after": In(Nothing)},
        out=Out(frame_type),
        retry_policy=DATABASE_RETRY,
        description=description,
    )
    def detect(settings: RecoveryConfig, san_database: SanDatabase):
        with paused_gc(), read_transaction(san_database.get_engine(), settings.write_limits) as conn:
            return detect_scraps(
                conn, rule, now=utc_now(), min_age=settings.orphan_min_age, lookback=settings.scrap_lookback
            )

    @op(
        name=f"recover_{name}",
        ins={"candidates": In(frame_type)},
        out=Out(Nothing),
        retry_policy=DATABASE_RETRY,
        description=f"Enqueue {rule.job_type} for the detected scraps, oldest first, in bounded batches.",
    )
    def recover(
        context: OpExecutionContext, settings: RecoveryConfig, candidates, san_database: SanDatabase,
        job_dispatcher: JobDispatcherResource,
    ):
        engine = san_database.get_engine()
        with paused_gc():
            report = recover_scraps(
                engine,
                job_dispatcher.for_database(engine),
                rule,
                candidates,
                now=utc_now(),
                thresholds={
                    "orphan_min_age_minutes": settings.orphan_min_age_minutes,
                    "scrap_lookback_hours": settings.scrap_lookback_hours,
                },
                policy=settings.policy,
            )
        record_audit(context, report)

    return detect, recover


detect_orphan_scraps, recover_orphan_scraps = scrap_recovery_ops(
    ORPHAN_SCRAPS, "orphan_scraps", "Scraps with no knowledge card and no active CARD_ANALYSIS job, older than the grace period."
)
detect_unrefined_scraps, recover_unrefined_scraps = scrap_recovery_ops(
    UNREFINED_SCRAPS, "unrefined_scraps", "Scraps with refined_content NULL and no active SCRAP_REFINE job, older than the grace period."
)
