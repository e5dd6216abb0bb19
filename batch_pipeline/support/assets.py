"""The redrive asset: redrive_job's one step. A dry run (the default) records an observation
listing what it would redrive; a real one a materialization listing every target and its new
job, who asked and why."""

from contextlib import contextmanager

from dagster import (
    AssetExecutionContext,
    AssetObservation,
    Failure,
    Output,
    asset,
)

from batch_pipeline.recovery.config import RecoveryConfig
from batch_pipeline.recovery.plan import COMMITTED_BY_FAILED_ATTEMPT, partial_report
from batch_pipeline.san.database import database_now, read_transaction, san_kinds
from batch_pipeline.san.ops import (
    as_metadata,
    retried_only_if_transient,
    warn_about_unannounced_jobs,
)
from batch_pipeline.san.resources import JobDispatcherResource, SanDatabase
from batch_pipeline.support.config import RedriveConfig
from batch_pipeline.support.redrive import (
    RedriveReport,
    exhausted_targets,
    nothing_matches,
    redrive,
)
from batch_pipeline.support.touches import BY_AREA, REDRIVE_ASSET

# Set by `python -m batch_pipeline redrive`: who ran it; a Launchpad run says so itself.
ASKED_BY_TAG = "batch_pipeline/asked_by"


def asked_by(tags: dict, run_id: str) -> str:
    if tags.get(ASKED_BY_TAG):
        return tags[ASKED_BY_TAG]
    if tags.get("dagster/user"):
        return tags["dagster/user"]
    return f"run {run_id} (the Launchpad or the API; no {ASKED_BY_TAG} tag)"


def matching_targets(engine, config: RedriveConfig):
    """The database's now, and the exhausted targets the config asks for (every match)."""
    with read_transaction(engine, config.write_limits) as conn:
        now = database_now(conn)
        return now, exhausted_targets(
            conn,
            BY_AREA[config.area.value],
            now,
            config.chosen,
            max_attempts=config.max_attempts,
            grace=RecoveryConfig().orphan_min_age,
        )


@contextmanager
def committed_work_recorded(context: AssetExecutionContext):
    """A redrive that fails after some batches committed records them (an observation) before
    the error goes on."""
    try:
        yield
    except Exception as error:
        committed = partial_report(error)
        if committed is not None and committed.redriven:
            metadata = {COMMITTED_BY_FAILED_ATTEMPT: 0, **committed.metadata()}
            context.log_event(
                AssetObservation(asset_key=REDRIVE_ASSET, metadata=as_metadata(metadata))
            )
        raise


@asset(
    name=REDRIVE_ASSET,
    group_name="san_support",
    kinds=san_kinds(),
    output_required=False,
    description="Another chance for exhausted targets: one new job beyond max_attempts each, "
    "through the enqueue path's guards. Metadata: the filter, every target -> new job id, who "
    "asked and why. A dry run (the default) is an observation listing what it would redrive.",
)
def redrive_asset(
    context: AssetExecutionContext,
    config: RedriveConfig,
    san_database: SanDatabase,
    job_dispatcher: JobDispatcherResource,
):
    engine = san_database.open_verified(config.write_limits)
    dispatcher = job_dispatcher.for_database(engine)
    recovery = BY_AREA[config.area.value]
    chosen = config.chosen
    with retried_only_if_transient():
        now, matched = matching_targets(engine, config)
        if matched.empty:
            raise Failure(
                description=nothing_matches(recovery, chosen, config.max_attempts),
                allow_retries=False,
            )
        report = RedriveReport(
            area=recovery.area,
            dry_run=config.dry_run,
            filter=chosen.words(),
            max_attempts=config.max_attempts,
            matched=len(matched),
            over_limit=max(0, len(matched) - chosen.limit),
            asked_by=asked_by(dict(context.run.tags), context.run.run_id),
            reason=config.reason,
        )
        with committed_work_recorded(context):
            report = redrive(
                engine,
                dispatcher,
                recovery,
                matched.head(chosen.limit),
                now,
                report,
                batch_size=config.batch_size,
                limits=config.write_limits,
            )
    verb = "would redrive" if report.dry_run else "redrove"
    context.log.info(
        f"{recovery.area}: {report.matched} exhausted targets match {report.filter}; {verb} "
        f"{len(report.would_redrive or report.redriven)}"
        + (f", {report.over_limit} over the limit" if report.over_limit else "")
        + (
            f", {len(report.skipped_by_race_ids)} skipped by race"
            if report.skipped_by_race_ids
            else ""
        )
    )
    warn_about_unannounced_jobs(context, REDRIVE_ASSET, report.announce_failures)
    if report.dry_run:
        context.log_event(
            AssetObservation(asset_key=REDRIVE_ASSET, metadata=as_metadata(report.metadata()))
        )
        return
    yield Output(None, metadata=as_metadata(report.metadata()))
