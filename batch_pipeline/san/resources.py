"""Dagster resources: the SAN database (SAN_DATABASE_URL) and the job dispatcher
(SAN_JOB_DISPATCHER). Thin wrappers over san.database and san.dispatch."""

from dagster import ConfigurableResource, EnvVar, Failure, InitResourceContext
from pydantic import Field, PrivateAttr
from sqlalchemy.engine import Engine

from batch_pipeline.san.database import (
    SAN_DATABASE_URL,
    SanConnectionError,
    check_connection,
    create_san_engine,
    embedded_database_url,
    read_transaction,
)
from batch_pipeline.san.dispatch import (
    DEFAULT_REDIS_URL,
    PG_NOTIFY_CHANNEL,
    REDIS_STREAM,
    SAN_JOB_DISPATCHER,
    SAN_NOTIFY_CHANNEL,
    SAN_REDIS_STREAM,
    SAN_REDIS_URL,
    Dispatcher,
    DispatcherConfigError,
    build_dispatcher,
)
from batch_pipeline.san.limits import WriteLimits
from batch_pipeline.san.schema import SanSchemaError, verify_schema
from batch_pipeline.san.settings import Setting


class SanDatabase(ConfigurableResource):
    """The SAN application's database. Unset URL: the embedded SQLite file in ./data, which
    `make run` (the sandbox) creates and seeds with a demo state."""

    url: str | None = Field(
        default=None,
        description="SQLAlchemy URL of the SAN database (SAN_DATABASE_URL), e.g. "
        "postgresql+psycopg://user:password@host:5432/san. Unset: the embedded SQLite demo in "
        "./data "
        "(made by `make run`).",
    )

    _engine: Engine | None = PrivateAttr(default=None)

    @property
    def is_embedded(self) -> bool:
        return not self.url

    def get_engine(self) -> Engine:
        """The engine, created once per process."""
        if self._engine is None:
            self._engine = create_san_engine(self.url or embedded_database_url())
        return self._engine

    def open_verified(self, limits: WriteLimits = WriteLimits()) -> Engine:
        """Connect and check every table and column the pipeline needs.

        Raises a Failure that names the problem (bad URL, unreachable server, missing table or
        column) and is not retried: retrying a wrong URL only repeats the same error. Reading
        the catalog waits on a table that a migration holds locked, so the waits are bounded.
        """
        try:
            engine = self.get_engine()
            check_connection(engine)
            with read_transaction(engine, limits) as conn:
                verify_schema(conn)
        except (SanConnectionError, SanSchemaError) as error:
            raise Failure(description=str(error), allow_retries=False) from error
        return engine

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None


class JobDispatcherResource(ConfigurableResource):
    """How new jobs are announced to SAN's workers (SAN_JOB_DISPATCHER)."""

    kind: str | None = Field(
        default=None,
        description="pg_notify | redis_stream | none. Unset: pg_notify on PostgreSQL, none on "
        "SQLite.",
    )
    # Unset (None) rather than a default value: the Launchpad pre-fills every default, and a
    # Redis URL on a deployment that has no Redis reads as a setting to fill in.
    redis_url: str | None = Field(
        default=None,
        description=f"Redis for redis_stream (SAN_REDIS_URL). Unset: {DEFAULT_REDIS_URL}.",
    )
    redis_stream: str | None = Field(
        default=None,
        description=f"The stream SAN's workers read (SAN_REDIS_STREAM). Unset: {REDIS_STREAM}.",
    )
    notify_channel: str | None = Field(
        default=None,
        description="The pg_notify channel SAN's workers LISTEN on (SAN_NOTIFY_CHANNEL). Unset: "
        f"{PG_NOTIFY_CHANNEL}.",
    )

    _dispatchers: dict = PrivateAttr(default_factory=dict)

    def for_database(self, engine: Engine) -> Dispatcher:
        """One dispatcher per database kind for the whole run (every area of recovery_job):
        what a run may wait on a Redis that does not answer is bounded for the run, not per
        area (dispatch.REDIS_WAIT_PER_RUN_S)."""
        if engine.dialect.name not in self._dispatchers:
            try:
                self._dispatchers[engine.dialect.name] = build_dispatcher(
                    self.kind,
                    engine.dialect.name,
                    self.redis_url or DEFAULT_REDIS_URL,
                    self.redis_stream or REDIS_STREAM,
                    self.notify_channel or PG_NOTIFY_CHANNEL,
                )
            except DispatcherConfigError as error:
                raise Failure(description=str(error), allow_retries=False) from error
        return self._dispatchers[engine.dialect.name]


def _from_env(setting: Setting) -> EnvVar | None:
    """An EnvVar when the variable is set (shown as such in the UI), else None (the default)."""
    return EnvVar(setting.name) if setting.raw() else None


def san_resources() -> dict:
    """The resources of every job and sensor, from the environment."""
    dispatcher = {
        "kind": _from_env(SAN_JOB_DISPATCHER),
        **{
            field: EnvVar(setting.name)
            for field, setting in (
                ("redis_url", SAN_REDIS_URL),
                ("redis_stream", SAN_REDIS_STREAM),
                ("notify_channel", SAN_NOTIFY_CHANNEL),
            )
            if setting.raw()
        },
    }
    return {
        "san_database": SanDatabase(url=_from_env(SAN_DATABASE_URL)),
        "job_dispatcher": JobDispatcherResource(**dispatcher),
    }
