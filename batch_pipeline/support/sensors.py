"""audit_index_sensor: keeps the audit index (audit_index.py) and the heal totals (heal_totals.py)
up to date, every INDEX_INTERVAL, within INDEX_BUDGET a tick. It requests no runs and writes
only Dagster's own storage."""

from datetime import timedelta

from dagster import DefaultSensorStatus, SensorEvaluationContext, SkipReason, sensor

from batch_pipeline.operations.run_retention import run_retention_days
from batch_pipeline.support.audit_index import retention_horizon, update_index
from batch_pipeline.support.heal_totals import update_heal_totals

INDEX_INTERVAL = timedelta(seconds=30)
INDEX_BUDGET = timedelta(seconds=20)
TOTALS_BUDGET = timedelta(seconds=5)


@sensor(
    name="audit_index_sensor",
    minimum_interval_seconds=int(INDEX_INTERVAL.total_seconds()),
    default_status=DefaultSensorStatus.RUNNING,
    description="Indexes the audit trail by target (in Dagster's key-value storage), so `explain` "
    "finds the runs that touched a scrap in milliseconds, and adds up what was healed for the "
    "metrics endpoint (batch_pipeline_healed_total). Requests no runs.",
)
def audit_index_sensor(context: SensorEvaluationContext):
    progress = update_index(
        context.instance, retention_horizon(None, run_retention_days()), budget=INDEX_BUDGET
    )
    folded = update_heal_totals(context.instance, budget=TOTALS_BUDGET)
    return SkipReason(
        f"indexed {progress.events} events ({progress.touches} touches, "
        f"{progress.buckets_written} buckets written); "
        + ("more are waiting: the next tick carries on" if progress.behind else "up to date")
        + f"; heal totals: {folded} materializations added"
    )
