"""fast_heal_sensor: every PROBE_INTERVAL, cheap indexed probes; a fast-heal run only when they
find something to heal.

The cursor is the end of the last probed window (database time), so each step of the
re-announcement schedule falls in exactly one window. A run still in flight holds the next
window back (the cursor does not move), so a slow run is never doubled; `run_key` makes each
request unique.
"""

from datetime import datetime

from dagster import (
    DagsterRunStatus,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SkipReason,
    sensor,
)
from sqlalchemy.exc import SQLAlchemyError

from batch_pipeline.fast_lane.assets import fast_heal
from batch_pipeline.fast_lane.config import FastHealConfig
from batch_pipeline.fast_lane.jobs import fast_heal_job
from batch_pipeline.fast_lane.rules import LANE_INDEXES, PROBE_INTERVAL, LaneWindow, probe
from batch_pipeline.recovery.registry import TARGET_RECOVERIES
from batch_pipeline.san.database import database_now, read_transaction, redacted
from batch_pipeline.san.dialects import dialect
from batch_pipeline.san.resources import JobDispatcherResource, SanDatabase

PROBE_SECONDS = int(PROBE_INTERVAL.total_seconds())

# What the tick's probe found (jobs + targets): a run is requested only when this is > 0.
FOUND_TAG = "batch_pipeline/found"

IN_FLIGHT = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
]


def run_config(window: LaneWindow) -> dict:
    return {
        "ops": {
            fast_heal.op.name: {
                "config": {
                    "window_since": window.since.isoformat(),
                    "window_until": window.until.isoformat(),
                }
            }
        }
    }


@sensor(
    name="fast_heal_sensor",
    job=fast_heal_job,
    minimum_interval_seconds=PROBE_SECONDS,
    default_status=DefaultSensorStatus.RUNNING,
    description=f"The fast lane: every {PROBE_SECONDS} s, indexed probes for unclaimed PENDING "
    "jobs, failed targets whose backoff "
    "has passed and targets the app never enqueued; requests a fast_heal_job run only when one is "
    "found (the "
    "tick says why it skipped). Turn it off here to heal on recovery_job's cadence only.",
)
def fast_heal_sensor(
    context: SensorEvaluationContext,
    san_database: SanDatabase,
    job_dispatcher: JobDispatcherResource,
):
    in_flight = context.instance.get_runs(
        RunsFilter(job_name=fast_heal_job.name, statuses=IN_FLIGHT), limit=1
    )
    if in_flight:
        return SkipReason(
            f"fast_heal_job run {in_flight[0].run_id} is still healing; the next window waits for "
            "it"
        )
    config = FastHealConfig()
    engine = san_database.get_engine()
    settings = config.settings(announcing=job_dispatcher.for_database(engine).kind != "none")
    try:
        with read_transaction(engine, config.write_limits) as conn:
            missing = dialect(conn).missing_valid_indexes(conn, LANE_INDEXES)
            if not missing:
                now = database_now(conn)
                window = LaneWindow.after(
                    datetime.fromisoformat(context.cursor) if context.cursor else None, now
                )
                found = probe(conn, window, settings, TARGET_RECOVERIES)
    except SQLAlchemyError as error:
        # The tick fails (red in the UI) with the cause named: the schema check says which
        # table or column is missing; otherwise the database's own first line.
        san_database.open_verified(config.write_limits)
        first_line = (str(getattr(error, "orig", error)).strip().splitlines() or [""])[0]
        raise RuntimeError(
            f"fast_heal_sensor cannot probe the SAN database at {redacted(engine.url)}: "
            f"{first_line}"
        ) from error
    if missing:
        # no SAN tables at all: that is the problem to name
        san_database.open_verified(config.write_limits)
        return SkipReason(
            f"the fast lane is off: the recommended indexes {', '.join(missing)} are missing or "
            "invalid, and "
            f"without them every probe would read whole tables every {PROBE_SECONDS} s. Run "
            "`python -m batch_pipeline "
            "create-indexes`; recovery_job heals meanwhile."
        )
    context.update_cursor(window.until.isoformat())
    if not found.anything_to_heal:
        return SkipReason(f"nothing to heal ({found.summary()})")
    return RunRequest(
        run_key=f"fast_heal:{window.until.isoformat()}",
        run_config=run_config(window),
        tags={FOUND_TAG: str(found.found), "batch_pipeline/fast_lane": found.summary()[:200]},
    )
