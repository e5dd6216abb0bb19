"""Dagster ops of recovery_job: a detect op and a re-enqueue op per recovery of the registry,
thin wrappers over each recovery's plain functions.

The run config is given once, to `check_san_database` (san/ops.py), which validates it and
passes it on to every other op as the `settings` input.
"""

from dagster import AssetMaterialization, In, Nothing, OpDefinition, OpExecutionContext, Out, op

from batch_pipeline.recovery.config import RecoveryConfig
from batch_pipeline.recovery.plan import RecoveryReport
from batch_pipeline.recovery.registry import RECOVERIES
from batch_pipeline.san.database import read_transaction, utc_now
from batch_pipeline.san.memory import paused_gc
from batch_pipeline.san.ops import DATABASE_RETRY, as_metadata, san_database_check_op, warn_about_unannounced_jobs
from batch_pipeline.san.resources import JobDispatcherResource, SanDatabase


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


def recovery_ops(recovery) -> tuple[OpDefinition, OpDefinition]:
    """The detect and re-enqueue ops of one recovery: `detect_<name>` -> `recover_<name>`."""
    frame_type = recovery.frame.dagster_type()

    @op(
        name=f"detect_{recovery.name}",
        # Nothing-typed: orders this detection after the previous recovery's writes.
        ins={"after": In(Nothing)},
        out=Out(frame_type),
        retry_policy=DATABASE_RETRY,
        description=recovery.detect_description,
    )
    def detect(settings: RecoveryConfig, san_database: SanDatabase):
        with paused_gc(), read_transaction(san_database.get_engine(), settings.write_limits) as conn:
            return recovery.detect(conn, settings, utc_now())

    @op(
        name=f"recover_{recovery.name}",
        ins={"candidates": In(frame_type)},
        out=Out(Nothing),
        retry_policy=DATABASE_RETRY,
        description=recovery.recover_description,
    )
    def recover(
        context: OpExecutionContext, settings: RecoveryConfig, candidates, san_database: SanDatabase,
        job_dispatcher: JobDispatcherResource,
    ):
        engine = san_database.get_engine()
        with paused_gc():
            report = recovery.recover(engine, job_dispatcher.for_database(engine), candidates, settings, utc_now())
        record_audit(context, report)

    return detect, recover


RECOVERY_OPS = {recovery.area: recovery_ops(recovery) for recovery in RECOVERIES}
