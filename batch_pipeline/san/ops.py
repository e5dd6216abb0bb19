"""What every job's ops share: the first op, which validates the run config and the SAN
database before any write; the retry policy for transient database faults; metadata helpers.

The first op's output is the validated config, passed to the job's other ops as their
`settings` input, so the Launchpad takes every setting in one place: the job's config mapping
(recovery_job: `ops.run_recovery.config`, the TIL job: `ops.run_til_auto_generation.config`).
"""

import functools
import inspect
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from dagster import (
    AssetKey,
    Backoff,
    Config,
    ConfigArgumentWarning,
    ConfigMapping,
    DagsterEventType,
    Failure,
    MetadataValue,
    OpExecutionContext,
    RetryPolicy,
    RetryRequested,
    op,
)
from sqlalchemy.exc import DBAPIError

from batch_pipeline.san.database import redacted
from batch_pipeline.san.errors import first_line as first_line_of
from batch_pipeline.san.resources import JobDispatcherResource, SanDatabase

# `settings` is an input that happens to be a Config object, not a second config parameter.
warnings.filterwarnings("ignore", category=ConfigArgumentWarning, message="Parameter 'settings'")

# A dropped connection or a lock timeout is worth another try (after 3 s, then 9 s); every
# other error fails the step at once (see retried_only_if_transient). Ops ask for it with
# `retried_on_error`, never as their `retry_policy`: Dagster turns an interrupt (the UI's
# Terminate, a SIGTERM) into a retry of an op that has a policy, and the retry writes on.
DATABASE_RETRY = RetryPolicy(max_retries=2, delay=3, backoff=Backoff.EXPONENTIAL)

# PostgreSQL errors a retry can cure: connection exceptions (08), insufficient resources (53),
# operator intervention (57: admin shutdown, statement timeout), transaction rollback (40:
# serialization failure, deadlock), and lock_not_available (a lock_timeout, 55P03).
TRANSIENT_SQLSTATE_CLASSES = frozenset({"08", "40", "53", "57"})
# A foreign-key violation (23503) too: the only one a write can meet is a row the app deleted while
# the
# statement ran (a user, during the TIL's insert); the retry re-checks and skips it.
TRANSIENT_SQLSTATES = frozenset({"55P03", "23503"})
TRANSIENT_SQLITE_ERRORS = frozenset({"SQLITE_BUSY", "SQLITE_LOCKED"})


def is_transient(error: BaseException) -> bool:
    """Whether the same step may succeed if tried again: a connection-level or contention fault,
    not a missing privilege, a read-only session, a missing column or bad data."""
    if isinstance(error, (ConnectionError, TimeoutError)):  # a network fault below the driver
        return True
    if not isinstance(error, DBAPIError):
        return False
    if error.connection_invalidated:
        return True
    sqlstate = getattr(error.orig, "sqlstate", None)
    if sqlstate:
        return sqlstate[:2] in TRANSIENT_SQLSTATE_CLASSES or sqlstate in TRANSIENT_SQLSTATES
    sqlite_error = getattr(error.orig, "sqlite_errorname", None)
    if sqlite_error:
        return sqlite_error in TRANSIENT_SQLITE_ERRORS
    # psycopg: no server answer, e.g. connection refused
    return type(error.orig).__name__ == "OperationalError"


@contextmanager
def retried_only_if_transient() -> Iterator[None]:
    """Let a transient database fault reach DATABASE_RETRY (`retries_requested`); turn any other
    error into a Failure
    that is not retried and names the cause (retrying InsufficientPrivilege only waits 12 s for
    the same error)."""
    try:
        yield
    except Failure:
        raise
    except Exception as error:
        if is_transient(error):
            raise
        cause = error.orig if isinstance(error, DBAPIError) else error
        sqlstate = getattr(cause, "sqlstate", None)
        first_line = first_line_of(cause)
        raise Failure(
            description=f"{type(cause).__name__}{f' (SQLSTATE {sqlstate})' if sqlstate else ''}: "
            f"{first_line}. "
            "Not retried: the same input gives the same error.",
            allow_retries=False,
        ) from error


@contextmanager
def retries_requested(policy: RetryPolicy = DATABASE_RETRY) -> Iterator[None]:
    """`policy` for errors only: an error (but a Failure that allows no retries) asks Dagster for
    the step's next try, after the policy's delay, up to its max_retries. An interrupt is no
    Exception and passes: the step fails as interrupted and a terminated run ends CANCELED."""
    try:
        yield
    except RetryRequested:
        raise
    except Exception as error:
        if isinstance(error, Failure) and not error.allow_retries:
            raise
        attempt = OpExecutionContext.get().retry_number + 1
        raise RetryRequested(
            max_retries=policy.max_retries, seconds_to_wait=policy.calculate_delay(attempt)
        ) from error


def retried_on_error(compute: Callable) -> Callable:
    """An op's or asset's compute function under `retries_requested`: put it below `@op`."""
    if inspect.isgeneratorfunction(compute):

        @functools.wraps(compute)
        def generator(*args, **kwargs):
            with retries_requested():
                yield from compute(*args, **kwargs)

        return generator

    @functools.wraps(compute)
    def function(*args, **kwargs):
        with retries_requested():
            return compute(*args, **kwargs)

    return function


def as_metadata(values: dict) -> dict:
    """Numbers stay numbers (the UI plots them over runs); lists and dicts become JSON."""
    return {
        key: MetadataValue.json(v) if isinstance(v, (list, dict)) else v
        for key, v in values.items()
    }


def warn_about_unannounced_jobs(
    context: OpExecutionContext, area: str, announce_failures: int
) -> None:
    """In the run's own log (the UI), not only the process log: jobs committed but not announced."""
    if announce_failures:
        context.log.warning(
            f"{area}: could not announce {announce_failures} new job(s) (the dispatcher failed; "
            "see announce_failures). They are committed as PENDING; the fast lane announces them "
            "again within seconds (with SAN_REANNOUNCE=off, ghost-job recovery re-enqueues them "
            "as ghosts)."
        )


# The node name every job gives its database check op: its run config goes there.
CHECK_NODE = "check_san_database"


def settings_mapping(config_class: type[Config]) -> ConfigMapping:
    """A graph-backed asset's config mapping: the Launchpad takes every field of `config_class`
    once, under the graph's name, and the graph hands them to its CHECK_NODE."""
    return ConfigMapping(
        config_fn=lambda config: {CHECK_NODE: {"config": config}},
        config_schema=config_class.to_fields_dict(),
    )


def graph_run_config(graph: str, config: dict | None = None) -> dict:
    """A run config of a job of graph-backed assets: `config` under ops.<graph>.config."""
    return {"ops": {graph: {"config": config or {}}}}


def san_database_check_op(
    config_class: type[Config],
    name: str,
    first: Callable[[OpExecutionContext, Config], None] | None = None,
):
    """The database check op for a job whose run config is `config_class`; `first(context,
    config)` runs before the check (the run's own bookkeeping, even when the check fails).

    Each job has its own op definition (`name` must be unique in the code location); jobs use
    it under the node name CHECK_NODE, so run config always goes there.

    A config value out of range fails here (pydantic names the field); so do a bad URL, an
    unreachable server, a missing table or column and an unknown dispatcher. No retries: the
    same input gives the same error.
    """

    @op(
        name=name,
        description="Validate the run config, connect to the SAN database and check its tables and "
        "columns.",
    )
    def check_san_database(
        context: OpExecutionContext,
        config: config_class,
        san_database: SanDatabase,
        job_dispatcher: JobDispatcherResource,
    ) -> config_class:
        if first is not None:
            first(context, config)
        engine = san_database.open_verified(config.write_limits)
        dispatcher = job_dispatcher.for_database(engine)
        context.log.info(f"SAN database {redacted(engine.url)}; dispatcher {dispatcher.kind}")
        return config

    return check_san_database


def committed_by_failed_attempts(
    context: OpExecutionContext, asset: str, marker: str
) -> list[dict]:
    """The metadata of the observations of `asset` that earlier attempts of this step, in this
    run, logged (marked by `marker`) before they failed: what they had committed."""
    records = context.instance.get_records_for_run(
        context.run_id, of_type=DagsterEventType.ASSET_OBSERVATION
    ).records
    committed = []
    for record in records:
        observation = record.event_log_entry.asset_observation
        if (
            observation is not None
            and observation.asset_key == AssetKey(asset)
            and record.event_log_entry.step_key == str(context.op_handle)
            and marker in observation.metadata
        ):
            committed.append({key: value.value for key, value in observation.metadata.items()})
    return committed


SWEPT = "its detection read in {batches} chunks"


def paced(throttle: dict, doing: str = "wrote {rows} rows in {batches} batches") -> str:
    """How the throttle paced the writes (or, with `doing`, a detection's sweep), for the log
    (san/throttle.py, ThrottleLog.metadata)."""
    if not throttle.get("batches"):
        return ""
    why = f": {throttle['why_it_slowed']}" if throttle.get("why_it_slowed") else ""
    return (
        f"; {doing.format(**throttle)} over {throttle['write_seconds']} s, rested "
        f"{throttle['rest_seconds']} s{why}"
    )
