"""audit_index_sensor: keeps the audit index (audit_index.py) up to date, every INDEX_INTERVAL,
within INDEX_BUDGET a tick. It requests no runs and writes only Dagster's own storage."""

from datetime import timedelta

from dagster import DefaultSensorStatus, SensorEvaluationContext, SkipReason, sensor

from batch_pipeline.operations.run_retention import run_retention_days
from batch_pipeline.support.audit_index import retention_horizon, update_index

INDEX_INTERVAL = timedelta(seconds=30)
INDEX_BUDGET = timedelta(seconds=20)


@sensor(
    name="audit_index_sensor",
    minimum_interval_seconds=int(INDEX_INTERVAL.total_seconds()),
    default_status=DefaultSensorStatus.RUNNING,
    description="Indexes the audit trail by target (in Dagster's key-value storage), so `explain` "
    "finds the runs that touched a scrap in milliseconds. Requests no runs.",
)
def audit_index_sensor(context: SensorEvaluationContext):
    progress = update_index(
        context.instance, retention_horizon(None, run_retention_days()), budget=INDEX_BUDGET
    )
    return SkipReason(
        f"indexed {progress.events} events ({progress.touches} touches, "
        f"{progress.buckets_written} buckets written); "
        + ("more are waiting: the next tick carries on" if progress.behind else "up to date")
    )
