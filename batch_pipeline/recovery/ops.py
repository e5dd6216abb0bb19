"""Dagster ops of recovery_job: a detect op and a re-enqueue op per recovery of the registry,
thin wrappers over each recovery's plain functions, and a last op for the database-wide checks.

The run config is given once, to the run_recovery graph (assets.py), which hands it to
`check_san_database` (san/ops.py); that op validates it and passes it on to every other op as
the `settings` input.
"""

from datetime import datetime

from dagster import (
    AssetExecutionContext,
    AssetMaterialization,
    AssetObservation,
    In,
    Nothing,
    OpDefinition,
    OpExecutionContext,
    Out,
    Output,
    op,
)

from batch_pipeline.recovery import checks, dead_runs, ghost_jobs
from batch_pipeline.recovery.config import RecoveryConfig
from batch_pipeline.recovery.plan import (
    COMMITTED_BY_FAILED_ATTEMPT,
    Recovery,
    RecoveryReport,
    partial_report,
    with_write_instant,
    write_instant,
)
from batch_pipeline.recovery.registry import RECOVERIES
from batch_pipeline.recovery.summary import (
    DRY_RUN,
    HEALED_TAG,
    HEALING,
    audit_metadata,
    run_summary,
)
from batch_pipeline.san.database import database_now, read_transaction
from batch_pipeline.san.memory import paused_gc
from batch_pipeline.san.ops import (
    CHECK_NODE,
    SWEPT,
    as_metadata,
    committed_by_failed_attempts,
    paced,
    retried_on_error,
    retried_only_if_transient,
    san_database_check_op,
    warn_about_unannounced_jobs,
)
from batch_pipeline.san.resources import JobDispatcherResource, SanDatabase
from batch_pipeline.san.sweep import sweep_pacing


def tag_the_run_as_healing(context: OpExecutionContext, settings: RecoveryConfig) -> None:
    """The `Healed` tag from the run's start: the run list says "(in progress)" while it runs,
    or that a dry run writes nothing; each area then sets its count."""
    summary = DRY_RUN if settings.policy.dry_run else HEALING
    context.instance.add_run_tags(context.run_id, {HEALED_TAG: summary})


check_san_database = san_database_check_op(RecoveryConfig, CHECK_NODE, first=tag_the_run_as_healing)


def audit_trail(context: AssetExecutionContext, recovery, report: RecoveryReport):
    """The audit trail: one materialization per area and run, zeros included, with the area's
    checks beside it. A dry run records an observation instead, so the materialization
    history (and its plots) holds only runs that wrote."""
    earlier = checks.recent_audits(context.instance, report.area, checks.DEFERRED_RUNS_IN_A_ROW)
    metadata = as_metadata(audit_metadata(recovery, report))
    context.log.info(
        f"{report.area}: detected {report.detected}, enqueued {report.enqueued}, exhausted "
        f"{report.exhausted}, deferred {report.deferred}, skipped by race {report.skipped_by_race}"
        + (" (dry run: nothing written)" if report.dry_run else "")
        + paced(report.throttle)
        + paced(report.detection_throttle, SWEPT)
    )
    warn_about_unannounced_jobs(context, report.area, report.announce_failures)
    if report.dry_run:
        context.log_event(AssetObservation(asset_key=report.area, metadata=metadata))
        return
    # The materialization's metadata, not the output's: output metadata is stored twice (the
    # step output event and the materialization), and the id lists are most of a step's
    # serialisation cost (docs/benchmarks.md, "Figures behind the code").
    context.add_asset_metadata(metadata, asset_key=report.area)
    tag_what_the_run_healed(context, recovery, report.enqueued)
    yield Output(None, recovery.name)
    yield checks.exhausted_targets(report, earlier)
    yield checks.deferred_backlog(report, earlier)


def tag_what_the_run_healed(context: AssetExecutionContext, recovery, healed: int) -> None:
    """The run's `Healed` tag, which the run list shows, with this area's count set."""
    run = context.instance.get_run_by_id(context.run_id)  # read again: earlier areas' counts
    summary = run_summary(
        run.tags.get(HEALED_TAG) if run else None,
        [each.noun for each in RECOVERIES],
        recovery.noun,
        healed,
    )
    context.instance.add_run_tags(context.run_id, {HEALED_TAG: summary})


def audited_across_attempts(
    context: OpExecutionContext, asset: str, recoveries, recover, same_candidates: bool
):
    """`recover(recovery)` for each recovery, in order; the reports cover every attempt of the
    step. An attempt that fails after some areas or write batches committed records what they
    did (an observation of `asset`, marked COMMITTED_BY_FAILED_ATTEMPT, which the UI and explain
    show). With `same_candidates` (recovery_job: a retry re-checks the candidates its detection
    found) a retry's reports already list that work: they recognise it in SAN's rows by the
    run's write instant, so a retry lists it even when Dagster's storage is what failed. Without
    (the fast lane detects anew: what an earlier attempt healed is no candidate) a retry adds the
    observations' reports to its own (RecoveryReport.merge_committed). Either way the audit
    trail misses nothing and calls none of the run's own work a race."""
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
    if context.retry_number and same_candidates:
        # The reports already list what earlier attempts wrote: they recognised it in SAN's
        # rows by the run's write instant, not in the event log (Dagster's storage may be what
        # failed them).
        for report in reports:
            if report.written_earlier:
                report.earlier_attempts = context.retry_number
    elif context.retry_number:
        earlier = [
            area
            for attempt in committed_by_failed_attempts(context, asset, COMMITTED_BY_FAILED_ATTEMPT)
            for area in attempt["areas"]
        ]
        for report in reports:
            report.merge_committed([area for area in earlier if area["area"] == report.area])
    return reports


def record_dead_runs(
    context: OpExecutionContext, recovery, engine, settings, own_instant: datetime | None
) -> None:
    """The audit of what earlier runs that ended without one wrote to this area, one entry per
    write instant, read back from SAN's rows (recovery/dead_runs.py). Its own failure fails
    nothing: the run's work comes first."""
    try:
        for writes in dead_runs.unaudited_writes(
            context.instance, context.job_name, recovery.area, own_instant
        ):
            report = recovery.report_of_writes_at(engine, writes.instant, settings.write_limits)
            [first, *later] = writes.run_ids
            context.log_event(
                AssetMaterialization(
                    asset_key=recovery.area,
                    description=f"What run {first} wrote before it ended without recording it, "
                    "read back from SAN's rows.",
                    metadata=as_metadata(
                        {
                            **audit_metadata(recovery, report),
                            dead_runs.AUDIT_OF_RUN: first,
                            **({dead_runs.AUDIT_OF_RUNS: writes.run_ids} if later else {}),
                            "write_instant": writes.instant.isoformat(),
                        }
                    ),
                )
            )
            mark_audited(context, recovery.area, writes.run_ids)
            context.log.warning(
                f"{recovery.area}: run {first} ended after writing, without its audit; recorded "
                f"here from SAN's rows: {report.changed} changed, {report.enqueued} enqueued"
            )
    except Exception:
        context.log.exception(f"{recovery.area}: could not record the audit of a dead run")


def mark_audited(context: OpExecutionContext, area: str, run_ids: list[str]) -> None:
    """Tag runs whose writes of `area` this run's audit lists, so no later run lists them."""
    for run_id in run_ids:
        context.instance.add_run_tags(run_id, {dead_runs.audited_tag(area): context.run_id})


def before_writing(
    context: OpExecutionContext, recovery, engine, settings: RecoveryConfig, candidates
) -> dead_runs.WriteInstant:
    """The instant this run writes the area at (recovery/dead_runs.py's rule); unless it is a dry
    run, the audit of dead runs' writes, then the run tagged with the instant before its first
    write, so a run that dies after it can be audited from SAN's rows."""
    writing = dead_runs.instant_to_write_at(
        context.instance,
        context.run,
        recovery.area,
        write_instant(candidates),
        lambda: database_now(engine),
    )
    if not settings.policy.dry_run:
        record_dead_runs(context, recovery, engine, settings, writing.instant)
        if len(candidates):
            context.instance.add_run_tags(
                context.run_id, {dead_runs.wrote_tag(recovery.area): writing.instant.isoformat()}
            )
    return writing


def recovery_ops(recovery: Recovery) -> tuple[OpDefinition, OpDefinition]:
    """The detect and re-enqueue ops of one recovery: `detect_<name>` -> `recover_<name>`."""
    frame_type = recovery.frame.dagster_type()
    return detect_op(recovery, frame_type), recover_op(recovery, frame_type)


def detect_op(recovery: Recovery, frame_type) -> OpDefinition:
    @op(
        name=f"detect_{recovery.name}",
        # Nothing-typed: orders this detection after the previous recovery's writes.
        ins={"after": In(Nothing)},
        out=Out(frame_type),
        description=recovery.detect_description,
    )
    @retried_on_error
    def detect(settings: RecoveryConfig, san_database: SanDatabase):
        with (
            retried_only_if_transient(),
            paused_gc(),
            read_transaction(san_database.get_engine(), settings.write_limits) as conn,
        ):
            now = database_now(conn)
            return with_write_instant(recovery.detect(conn, settings, now), now)

    return detect


def recover_op(recovery: Recovery, frame_type) -> OpDefinition:
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
        description=recovery.recover_description,
    )
    @retried_on_error
    def recover(
        context: AssetExecutionContext,
        settings: RecoveryConfig,
        candidates,
        san_database: SanDatabase,
        job_dispatcher: JobDispatcherResource,
    ):
        engine = san_database.get_engine()
        writing = before_writing(
            context.op_execution_context, recovery, engine, settings, candidates
        )
        instant = writing.instant
        candidates = with_write_instant(candidates, instant)  # its retries recognise its rows
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
                    instant,
                ),
                same_candidates=True,
            )
        report.includes_writes_of_runs = writing.lists_writes_of if report.written_earlier else []
        report.detection_throttle = sweep_pacing(candidates)
        yield from audit_trail(context, recovery, report)
        if not settings.policy.dry_run:
            # the writes of the run this one re-executes, listed above with its own
            mark_audited(context.op_execution_context, recovery.area, writing.lists_writes_of)
        yield Output(None, "done")

    return recover


RECOVERY_OPS = {recovery.area: recovery_ops(recovery) for recovery in RECOVERIES}


@op(
    ins={"after": In(Nothing)},
    out={checks.output_name(spec): Out(is_required=False) for spec in checks.DATABASE_CHECKS},
    description="The database-wide checks, after every recovery: ghost backlog, recommended "
    "indexes, unknown statuses.",
)
@retried_on_error
def check_recovery_health(settings: RecoveryConfig, san_database: SanDatabase):
    with (
        retried_only_if_transient(),
        read_transaction(san_database.get_engine(), settings.write_limits) as conn,
    ):
        results = checks.database_checks(
            conn, ghost_jobs.GHOST_JOB_RECOVERY.rule(settings, database_now(conn))
        )
    yield from results
