"""Helpers for tests that run batch_pipeline's jobs in process (execute_in_process, an
ephemeral or given Dagster instance) and read their audit trail back."""

import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from dagster import (
    AssetKey,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    build_run_status_sensor_context,
    build_sensor_context,
)
from dagster._core.events import EngineEventData
from dagster._core.remote_origin import (
    GrpcServerCodeLocationOrigin,
    RemoteJobOrigin,
    RemoteRepositoryOrigin,
)
from dagster._core.utils import make_new_run_id
from sqlalchemy import text

from batch_pipeline.definitions import defs
from batch_pipeline.fast_lane.jobs import fast_heal_job
from batch_pipeline.fast_lane.sensors import fast_heal_sensor
from batch_pipeline.fast_lane.tick import LaneState
from batch_pipeline.operations.run_workers import LOCATION_NAME
from batch_pipeline.recovery.assets import recovery_run_config
from batch_pipeline.san.database import create_san_engine
from batch_pipeline.san.dispatch import Dispatcher
from batch_pipeline.san.resources import JobDispatcherResource, SanDatabase
from batch_pipeline.san.schema import create_recommended_indexes
from batch_pipeline.san.tables import CARD_ANALYSIS, FAILED, PROCESSING, TIL_GENERATION
from batch_pipeline.til.assets import til_run_config

SEOUL = ZoneInfo("Asia/Seoul")


def run_recovery(db, instance=None, config=None, dispatcher=None, url=None):
    instance = instance or DagsterInstance.ephemeral()
    result = defs.resolve_job_def("recovery_job").execute_in_process(
        run_config=recovery_run_config(config),
        resources={
            "san_database": SanDatabase(url=url or db.url),
            "job_dispatcher": dispatcher
            if isinstance(dispatcher, JobDispatcherResource)
            else JobDispatcherResource(kind=dispatcher or "none"),
        },
        instance=instance,
        raise_on_error=False,
    )
    return result, instance


def shown_first(tags: dict[str, str]) -> str:
    """The tag the Dagster UI's run list shows first: it lists a run's tags in key order (the
    run storage keeps them sorted) and hides Dagster's own (dagster/, .dagster/) by default."""
    return sorted(key for key in tags if not key.startswith(("dagster/", ".dagster/")))[0]


def latest_metadata(instance, area):
    event = instance.get_latest_materialization_event(AssetKey(area))
    assert event is not None, f"no materialization of {area}"
    return {key: value.value for key, value in event.asset_materialization.metadata.items()}


class KillsItsOwnConnectionOnce(JobDispatcherResource):
    """The PostgreSQL backend of the run is terminated (pg_terminate_backend) inside batch 2."""

    admin_url: str

    def for_database(self, engine):
        admin_url = self.admin_url

        class Killer(Dispatcher):
            calls = 0

            def announce_in_transaction(self, conn, new_jobs):
                Killer.calls += 1
                if Killer.calls == 2 and not KILLED:
                    KILLED.append(True)
                    pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
                    with create_san_engine(admin_url).connect() as admin:
                        admin.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
                    conn.execute(text("SELECT 1"))  # the dead connection fails here

        return Killer()


KILLED: list = []


def at(day: str, hour=12, minute=0, second=0, zone=SEOUL):
    d = date.fromisoformat(day)
    return datetime(d.year, d.month, d.day, hour, minute, second, tzinfo=zone).astimezone(UTC)


def run_til(
    db, partition_key, definitions=None, instance=None, dispatcher=None, config=None, tags=None
):
    instance = instance or DagsterInstance.ephemeral()
    result = (
        (definitions or defs)
        .resolve_job_def("til_auto_generation_job")
        .execute_in_process(
            partition_key=partition_key,
            tags=tags,
            run_config=til_run_config(config),
            resources={
                "san_database": SanDatabase(url=db.url),
                "job_dispatcher": dispatcher or JobDispatcherResource(kind="none"),
            },
            instance=instance,
            raise_on_error=False,
        )
    )
    return result, instance


def resources(db, dispatcher="none", channel="san_jobs"):
    return {
        "san_database": SanDatabase(url=db.url),
        "job_dispatcher": JobDispatcherResource(kind=dispatcher, notify_channel=channel),
    }


def tick(db, instance, cursor=None, dispatcher="none", channel="san_jobs", indexes=True):
    """One evaluation of the sensor; (its result, the cursor after it)."""
    if indexes:  # as a production database has them (the sensor probes only with them)
        create_recommended_indexes(db.engine)
    with build_sensor_context(
        instance=instance, cursor=cursor, resources=resources(db, dispatcher, channel)
    ) as context:
        result = fast_heal_sensor(context)
        return result, result.cursor if result.cursor is not None else context.cursor


def run_fast_heal(db, instance, dispatcher="none", channel="san_jobs", config=None):
    return defs.resolve_job_def(fast_heal_job.name).execute_in_process(
        run_config={"ops": {"fast_heal": {"config": config or {}}}},
        resources=resources(db, dispatcher, channel),
        instance=instance,
        raise_on_error=False,
    )


def run_redrive(db, instance, config, tags=None):
    """redrive_job in process (a dry run unless the config says `dry_run: False`)."""
    return defs.resolve_job_def("redrive_job").execute_in_process(
        run_config={"ops": {"redrive": {"config": config}}},
        resources=resources(db),
        instance=instance,
        tags=tags,
        raise_on_error=False,
    )


def run_explain(db, instance, kind, target_id):
    return defs.resolve_job_def("explain_job").execute_in_process(
        run_config={"ops": {"explain_target": {"config": {"kind": kind, "id": target_id}}}},
        resources=resources(db),
        instance=instance,
        raise_on_error=False,
    )


def recent_start(db):
    """A cursor whose window starts 5 s before now."""
    return LaneState(until=db.now - timedelta(seconds=5)).to_json()


def run_failure_alert(result, instance):
    """run_failure_alert's evaluation of a failed run, as the daemon does it."""
    context = build_run_status_sensor_context(
        sensor_name="run_failure_alert",
        dagster_event=result.get_run_failure_event(),
        dagster_instance=instance,
        dagster_run=result.dagster_run,
    ).for_run_failure()
    defs.resolve_sensor_def("run_failure_alert")(context)


def record_sensor_tick(
    instance,
    name: str,
    status,
    at: float,
    *,
    skip_reason: str | None = None,
    error: str | None = None,
    running: bool = True,
    cursor: str | None = None,
):
    """A finished tick of sensor `name` in `instance`, as the daemon stores it (the sensor's
    state created or updated: running or stopped, its cursor)."""
    from dagster._core.remote_origin import (
        RegisteredCodeLocationOrigin,
        RemoteInstigatorOrigin,
        RemoteRepositoryOrigin,
    )
    from dagster._core.scheduler.instigation import (
        InstigatorState,
        InstigatorStatus,
        InstigatorType,
        SensorInstigatorData,
        TickData,
    )
    from dagster._utils.error import SerializableErrorInfo

    origin = RemoteInstigatorOrigin(
        RemoteRepositoryOrigin(RegisteredCodeLocationOrigin("batch_pipeline"), "__repository__"),
        name,
    )
    state = InstigatorState(
        origin,
        InstigatorType.SENSOR,
        InstigatorStatus.DECLARED_IN_CODE if running else InstigatorStatus.STOPPED,
        SensorInstigatorData(last_tick_timestamp=at, cursor=cursor, sensor_type=None),
    )
    if instance.get_instigator_state(origin.get_id(), state.selector_id) is None:
        instance.add_instigator_state(state)
    else:
        instance.update_instigator_state(state)
    instance.create_tick(
        TickData(
            instigator_origin_id=origin.get_id(),
            instigator_name=name,
            instigator_type=InstigatorType.SENSOR,
            status=status,
            timestamp=at,
            run_ids=[],
            skip_reason=skip_reason,
            error=SerializableErrorInfo(error, [], "Exception") if error else None,
            selector_id=state.selector_id,
        )
    )


def broken_state(db):
    """One fragment per recovery area, and healthy rows beside them: (the ghost job, its scrap,
    the orphan scrap, the unrefined scrap, the unwritten summary)."""
    user = db.user()
    ghost_scrap = db.scrap(user, created_at=db.ago(hours=3))  # its CARD_ANALYSIS is stuck
    ghost = db.job(
        CARD_ANALYSIS,
        ghost_scrap,
        PROCESSING,
        created_at=db.ago(hours=3),
        started_at=db.ago(hours=2),
    )
    orphan = db.scrap(user, created_at=db.ago(hours=3))
    unrefined = db.scrap(user, created_at=db.ago(hours=3), refined=False, card=True)
    db.scrap(user, created_at=db.ago(hours=3), card=True)  # healthy
    unwritten = db.summary(user, created_at=db.ago(hours=3))  # its TIL_GENERATION failed
    db.job(TIL_GENERATION, unwritten, FAILED, created_at=db.ago(hours=3))
    db.summary(user, created_at=db.ago(hours=3), content="TIL")  # healthy
    return ghost, ghost_scrap, orphan, unrefined, unwritten


def run_in_flight(
    instance: DagsterInstance,
    pid: int | None,
    status: DagsterRunStatus = DagsterRunStatus.STARTED,
    location: str = LOCATION_NAME,
) -> str:
    """A run of `location` in `status` whose process recorded `pid` as Dagster's run worker
    does ("Started process for run (pid: N)."); its id."""
    origin = RemoteJobOrigin(
        RemoteRepositoryOrigin(
            GrpcServerCodeLocationOrigin(host="localhost", port=4000, location_name=location),
            "__repository__",
        ),
        "recovery_job",
    )
    run = instance.add_run(
        DagsterRun(
            job_name="recovery_job",
            run_id=make_new_run_id(),
            status=status,
            remote_job_origin=origin,
        )
    )
    if pid is not None:
        instance.report_engine_event(
            f"Started process for run (pid: {pid}).", run, EngineEventData.in_process(pid)
        )
    return run.run_id


def a_process_that_has_exited() -> int:
    """The pid of a process of this host that has just exited."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid
