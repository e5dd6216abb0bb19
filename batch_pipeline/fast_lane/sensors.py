"""fast_heal_sensor: the fast lane's clock. Every PROBE_INTERVAL one tick (tick.py): the jobs due
are announced again by the sensor itself (a re-announcement changes no row: no run needed),
recorded as a materialization of fast_lane_reannouncements; and when the probe finds targets to
retry or enqueue, a fast_heal_job run is requested (one at a time).

Exact audit, bounded announcements: after a round is announced (its transaction committed, or
Redis accepted it), the tick writes it to Dagster's own key-value storage before it returns. If
the tick's result is then lost (the daemon died, the result could not be stored), the next tick
finds a round newer than its cursor: it records that round's audit and carries on from where it
stopped, instead of announcing the same window again.
"""

import json

from dagster import (
    AssetMaterialization,
    DagsterRunStatus,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)
from sqlalchemy.exc import SQLAlchemyError

from batch_pipeline.fast_lane.announcements import MAX_ANNOUNCEMENTS_PER_TICK
from batch_pipeline.fast_lane.assets import REANNOUNCEMENTS_ASSET
from batch_pipeline.fast_lane.config import FastHealConfig
from batch_pipeline.fast_lane.jobs import fast_heal_job
from batch_pipeline.fast_lane.tick import PROBE_INTERVAL, LaneState, Tick, lane_tick
from batch_pipeline.recovery.registry import TARGET_RECOVERIES
from batch_pipeline.san.database import read_transaction, redacted
from batch_pipeline.san.dialects import dialect
from batch_pipeline.san.errors import first_line as first_line_of
from batch_pipeline.san.indexes import ACTIVE_JOBS_INDEX
from batch_pipeline.san.ops import as_metadata
from batch_pipeline.san.resources import JobDispatcherResource, SanDatabase

PROBE_SECONDS = int(PROBE_INTERVAL.total_seconds())
SENSOR_NAME = "fast_heal_sensor"
# Dagster's daemon key-value storage: the last round this sensor announced, written before the
# tick returns (see the module's docstring).
LAST_ROUND_KEY = f"batch_pipeline/{SENSOR_NAME}/last_round"

# How a tick that skips because the lane is off begins its reason (the metrics endpoint and the
# fast lane's watch tell an off lane from one with nothing to heal by it).
LANE_OFF = "the fast lane is off"

# What the tick's probe found (targets to retry or enqueue): a run is requested only when > 0.
FOUND_TAG = "batch_pipeline/found"

IN_FLIGHT = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
]

# Without these (valid) indexes every probe reads whole tables every PROBE_INTERVAL: the sensor
# then runs the lane only while the tables are small enough for that to stay within a tick's
# budget (SMALL_TABLES_BYTES: jobs, scraps and summaries together; `python -m bench.small_tables`
# measures a tick by their size, docs/reliability.md), and otherwise skips, naming them, while
# recovery_job alone heals.
SMALL_TABLES_BYTES = 2 * 2**20
PROBED_TABLES = ("jobs", "scraps", "daily_summaries")
LANE_INDEXES = (
    ACTIVE_JOBS_INDEX,
    "ix_san_jobs_failed_updated",
    "ix_san_jobs_target",
    "ix_san_scraps_created_at",
    "ix_san_scraps_unrefined_by_id",
    "ix_san_daily_summaries_unwritten_by_id",
)


def round_metadata(tick: Tick) -> dict:
    return {
        **tick.announcements.metadata(),
        "round": tick.state.round,
        "threshold_seconds": tick.state.threshold.total_seconds(),
        **(
            {"claim_latency_p99_seconds": round(tick.state.claim_p99.total_seconds(), 3)}
            if tick.state.claim_p99
            else {}
        ),
        "claims_sampled": tick.state.claims,
        "window_since": tick.window.since.isoformat(),
        "window_until": tick.window.until.isoformat(),
    }


def last_round(context: SensorEvaluationContext) -> dict | None:
    stored = context.instance.daemon_cursor_storage.get_cursor_values({LAST_ROUND_KEY})
    return json.loads(stored[LAST_ROUND_KEY]) if stored.get(LAST_ROUND_KEY) else None


def remember_round(context: SensorEvaluationContext, tick: Tick, metadata: dict) -> None:
    context.instance.daemon_cursor_storage.set_cursor_values(
        {
            LAST_ROUND_KEY: json.dumps(
                {"round": tick.state.round, "state": tick.state.to_json(), "metadata": metadata}
            )
        }
    )


def reannouncements_event(metadata: dict) -> AssetMaterialization:
    return AssetMaterialization(asset_key=REANNOUNCEMENTS_ASSET, metadata=as_metadata(metadata))


@sensor(
    name=SENSOR_NAME,
    job=fast_heal_job,
    minimum_interval_seconds=PROBE_SECONDS,
    default_status=DefaultSensorStatus.RUNNING,
    description=f"The fast lane: every {PROBE_SECONDS} s, indexed probes; it announces again the "
    "PENDING jobs no worker claimed (recorded on fast_lane_reannouncements) and requests a "
    "fast_heal_job run when failed targets are due for a retry or the app never enqueued a "
    f"target (at most {MAX_ANNOUNCEMENTS_PER_TICK:,} announcements a tick; each tick says what it "
    "did and why it skipped). Turn it off here to heal on recovery_job's cadence only.",
)
def fast_heal_sensor(
    context: SensorEvaluationContext,
    san_database: SanDatabase,
    job_dispatcher: JobDispatcherResource,
):
    config = FastHealConfig()
    engine = san_database.get_engine()
    state, events = recorded_lost_round(context, LaneState.from_json(context.cursor))
    off = lane_off_because_unindexed(engine, san_database, config)
    if off:
        return SensorResult(
            skip_reason=SkipReason(off), cursor=state.to_json(), asset_events=events
        )
    try:
        tick = lane_tick(
            engine,
            job_dispatcher.for_database(engine),
            state,
            config.lane_settings(),
            TARGET_RECOVERIES,
            config.write_limits,
        )
    except SQLAlchemyError as error:
        # The tick fails (red in the UI) with the cause named: the schema check says which
        # table or column is missing; otherwise the database's own first line.
        san_database.open_verified(config.write_limits)
        raise RuntimeError(
            f"{SENSOR_NAME} cannot probe the SAN database at {redacted(engine.url)}: "
            f"{first_line_of(error)}"
        ) from error
    if tick.announcements.detected:
        metadata = round_metadata(tick)
        remember_round(context, tick, metadata)
        events.append(reannouncements_event(metadata))
    run_requests, skip_reason = requested_runs(context, tick)
    return SensorResult(
        run_requests=run_requests,
        skip_reason=SkipReason(skip_reason) if skip_reason and not run_requests else None,
        cursor=tick.state.to_json(),
        asset_events=events,
    )


def recorded_lost_round(
    context: SensorEvaluationContext, state: LaneState
) -> tuple[LaneState, list[AssetMaterialization]]:
    """The cursor's state, or the newer round an earlier tick announced but whose result was lost
    (with its audit, recorded now)."""
    lost = last_round(context)
    if lost is None or lost["round"] <= state.round:
        return state, []
    audit = reannouncements_event({**lost["metadata"], "recorded_by_a_later_tick": True})
    return LaneState.from_json(lost["state"]), [audit]


def lane_off_because_unindexed(engine, san_database: SanDatabase, config) -> str | None:
    """Why the lane is off this tick (its indexes missing on tables too big to probe without
    them), or None."""
    with read_transaction(engine, config.write_limits) as conn:
        db_dialect = dialect(conn)
        missing = db_dialect.missing_valid_indexes(conn, LANE_INDEXES)
        size = db_dialect.table_bytes(conn, PROBED_TABLES) if missing else 0
    if not missing or size <= SMALL_TABLES_BYTES:
        return None
    san_database.open_verified(config.write_limits)  # no SAN tables: that is the problem
    return (
        f"{LANE_OFF}: the recommended indexes {', '.join(missing)} are "
        f"missing or invalid, and without them every probe would read whole tables "
        f"({size / 2**20:.1f} MB, more than the {SMALL_TABLES_BYTES / 2**20:g} MB a "
        f"tick can read every {PROBE_SECONDS} s). Run `python -m batch_pipeline "
        "create-indexes`; recovery_job heals meanwhile."
    )


def requested_runs(context: SensorEvaluationContext, tick: Tick) -> tuple[list, str | None]:
    """A fast_heal_job run when the probe found targets and none is in flight; else why not."""
    if not tick.retries_due:
        if not tick.announcements.detected:
            return [], f"nothing to heal ({tick.summary()})"
        return [], tick.summary()
    in_flight = context.instance.get_runs(
        RunsFilter(job_name=fast_heal_job.name, statuses=IN_FLIGHT), limit=1
    )
    if in_flight:
        return [], (
            f"{tick.summary()}; fast_heal_job run {in_flight[0].run_id} is still healing: the "
            "next tick asks again"
        )
    request = RunRequest(
        run_key=f"fast_heal:{tick.now.isoformat()}",
        tags={FOUND_TAG: str(tick.retries_due), "batch_pipeline/fast_lane": tick.summary()[:200]},
    )
    return [request], None
