"""Dagster ops of recovery_job: a detect op and a re-enqueue op per recovery of the registry,
thin wrappers over each recovery's plain functions, and a last op for the database-wide checks.

The run config is given once, to the run_recovery graph (assets.py), which hands it to
`check_san_database` (san/ops.py); that op validates it and passes it on to every other op as
the `settings` input.
"""

from dagster import (
    AssetExecutionContext,
    AssetObservation,
    In,
    Nothing,
    OpDefinition,
    OpExecutionContext,
    Out,
    Output,
    op,
)

from batch_pipeline.recovery import checks, ghost_jobs
from batch_pipeline.recovery.config import RecoveryConfig
from batch_pipeline.recovery.plan import COMMITTED_BY_FAILED_ATTEMPT, RecoveryReport, partial_report
from batch_pipeline.recovery.registry import RECOVERIES
from batch_pipeline.san.database import database_now, read_transaction
from batch_pipeline.san.memory import paused_gc
from batch_pipeline.san.ops import (
    DATABASE_RETRY,
    as_metadata,
    committed_by_failed_attempts,
    retried_only_if_transient,
    san_database_check_op,
    warn_about_unannounced_jobs,
)
from batch_pipeline.san.resources import JobDispatcherResource, SanDatabase

check_san_database = san_database_check_op(RecoveryConfig, "check_san_database")


def audit_trail(context: AssetExecutionContext, recovery, report: RecoveryReport):
    """The audit trail: one materialization per area and run, zeros included, with the area's
    checks beside it. A dry run records an observation instead, so the materialization
    history (and its plots) holds only runs that wrote."""
    earlier = checks.recent_audits(context.instance, report.area, checks.DEFERRED_RUNS_IN_A_ROW)
    metadata = as_metadata(report.metadata())
    context.log.info(
        f"{report.area}: detected {report.detected}, enqueued {report.enqueued}, exhausted "
        f"{report.exhausted}, deferred {report.deferred}, skipped by race {report.skipped_by_race}"
        + (" (dry run: nothing written)" if report.dry_run else "")
    )
    warn_about_unannounced_jobs(context, report.area, report.announce_failures)
    if report.dry_run:
        context.log_event(AssetObservation(asset_key=report.area, metadata=metadata))
        return
    # The materialization's metadata, not the output's: output metadata is stored twice (the
    # step output event and the materialization), and the id lists are most of a step's
    # serialisation cost (docs/benchmarks.md, "Figures behind the code").
    context.add_asset_metadata(metadata, asset_key=report.area)
    yield Output(None, recovery.name)
    yield checks.exhausted_targets(report, earlier)
    yield checks.deferred_backlog(report, earlier)


def audited_across_attempts(
    context: OpExecutionContext, asset: str, recoveries, recover, same_candidates: bool
):
    """`recover(recovery)` for each recovery, in order; the reports cover every attempt of the
    step. An attempt that fails after some areas or write batches committed records what they
    did (an observation of `asset`, marked COMMITTED_BY_FAILED_ATTEMPT), and a retry adds that
    to its own reports (RecoveryReport.merge_committed; `same_candidates`: whether the retry
    re-checks the same detected candidates, as recovery_job's does, or detects anew, as the
    fast lane's does), so the audit trail misses nothing and calls none of the run's own work a
    race."""
    reports: list[RecoveryReport] = []
    try:
        for recovery in recoveries:
            reports.append(recover(recovery))
    except Exception as error:
        committed = reports + [report for report in [partial_report(error)] if report is not None]
        if any(report.changed for report in committed):
            context.log_event(
                AssetObservation(
                    asset_key=asset,
                    metadata=as_metadata(
                        {
                            COMMITTED_BY_FAILED_ATTEMPT: context.retry_number,
                            "areas": [
                                report.committed_metadata(context.retry_number)
                                for report in committed
                            ],
                        }
                    ),
                )
            )
            context.log.warning(
                f"{asset}: attempt {context.retry_number + 1} failed after committing "
                f"{sum(report.changed for report in committed)} change(s); a retry's audit trail "
                "includes them"
            )
        raise
    if context.retry_number:
        earlier = [
            area
            for attempt in committed_by_failed_attempts(context, asset, COMMITTED_BY_FAILED_ATTEMPT)
            for area in attempt["areas"]
        ]
        for report in reports:
            report.merge_committed(
                [area for area in earlier if area["area"] == report.area], same_candidates
            )
    return reports


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
        with (
            retried_only_if_transient(),
            paused_gc(),
            read_transaction(san_database.get_engine(), settings.write_limits) as conn,
        ):
            return recovery.detect(conn, settings, database_now(conn))

    @op(
        name=f"recover_{recovery.name}",
        ins={"candidates": In(frame_type)},
        out={
            "done": Out(Nothing, description="Orders the next recovery after this one's writes."),
            # optional: a dry run materializes nothing
            recovery.name: Out(
                Nothing, is_required=False, description=f"The {recovery.area} audit trail."
            ),
            **{
                checks.output_name(spec): Out(is_required=False)
                for spec in checks.area_checks(recovery.area)
            },
        },
        retry_policy=DATABASE_RETRY,
        description=recovery.recover_description,
    )
    def recover(
        context: AssetExecutionContext,
        settings: RecoveryConfig,
        candidates,
        san_database: SanDatabase,
        job_dispatcher: JobDispatcherResource,
    ):
        engine = san_database.get_engine()
        with retried_only_if_transient(), paused_gc():
            [report] = audited_across_attempts(
                context.op_execution_context,
                recovery.area,
                [recovery],
                lambda recovery: recovery.recover(
                    engine,
                    job_dispatcher.for_database(engine),
                    candidates,
                    settings,
                    database_now(engine),
                ),
                same_candidates=True,
            )
        yield from audit_trail(context, recovery, report)
        yield Output(None, "done")

    return detect, recover


RECOVERY_OPS = {recovery.area: recovery_ops(recovery) for recovery in RECOVERIES}


@op(
    ins={"after": In(Nothing)},
    out={checks.output_name(spec): Out(is_required=False) for spec in checks.DATABASE_CHECKS},
    retry_policy=DATABASE_RETRY,
    description="The database-wide checks, after every recovery: ghost backlog, recommended "
    "indexes, unknown statuses.",
)
def check_recovery_health(settings: RecoveryConfig, san_database: SanDatabase):
    with (
        retried_only_if_transient(),
        read_transaction(san_database.get_engine(), settings.write_limits) as conn,
    ):
        results = checks.database_checks(
            conn, ghost_jobs.GHOST_JOB_RECOVERY.rule(settings, database_now(conn))
        )
    yield from results
