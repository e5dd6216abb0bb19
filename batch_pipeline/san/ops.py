"""The first op of every job: validate the run config and the SAN database before any write.

Its output is the validated config, passed to the job's other ops as their `settings` input, so
the Launchpad takes every setting in one place: `ops.check_san_database.config`.
"""

import warnings

from dagster import Backoff, Config, ConfigArgumentWarning, MetadataValue, OpExecutionContext, RetryPolicy, op

from batch_pipeline.san.database import redacted
from batch_pipeline.san.resources import JobDispatcherResource, SanDatabase

# `settings` is an input that happens to be a Config object, not a second config parameter.
warnings.filterwarnings("ignore", category=ConfigArgumentWarning, message="Parameter 'settings'")

# A dropped connection or a lock timeout is worth another try; config and input errors are
# raised as Failure(allow_retries=False) and fail at once.
DATABASE_RETRY = RetryPolicy(max_retries=2, delay=3, backoff=Backoff.EXPONENTIAL)


def as_metadata(values: dict) -> dict:
    """Numbers stay numbers (the UI plots them over runs); lists and dicts become JSON."""
    return {key: MetadataValue.json(v) if isinstance(v, (list, dict)) else v for key, v in values.items()}


def warn_about_unannounced_jobs(context: OpExecutionContext, area: str, announce_failures: int) -> None:
    """In the run's own log (the UI), not only the process log: jobs committed but not announced."""
    if announce_failures:
        context.log.warning(
            f"{area}: could not announce {announce_failures} new job(s) (the dispatcher failed; see "
            "announce_failures). They are committed as PENDING; the next ghost-job recovery re-enqueues them."
        )


def san_database_check_op(config_class: type[Config], name: str):
    """The database check op for a job whose run config is `config_class`.

    Each job has its own op definition (`name` must be unique in the code location); jobs use
    it under the node name `check_san_database`, so run config always goes there.

    A config value out of range fails here (pydantic names the field); so do a bad URL, an
    unreachable server, a missing table or column and an unknown dispatcher. No retries: the
    same input gives the same error.
    """

    @op(
        name=name,
        description="Validate the run config, connect to the SAN database and check its tables and columns.",
    )
    def check_san_database(
        context: OpExecutionContext, config: config_class, san_database: SanDatabase,
        job_dispatcher: JobDispatcherResource,
    ) -> config_class:
        engine = san_database.open_verified(config.write_limits)
        dispatcher = job_dispatcher.for_database(engine)
        context.log.info(f"SAN database {redacted(engine.url)}; dispatcher {dispatcher.kind}")
        return config

    return check_san_database
