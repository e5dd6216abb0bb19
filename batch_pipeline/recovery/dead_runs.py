"""The audit of a run that died (SIGKILL, out of memory, a lost host) after some of its writes
committed and before it recorded them.

Before an area writes, its run is tagged with the area's write instant (`wrote_tag`): every row
the area writes carries that instant (recovery/plan.py, WRITE_INSTANT). A later run of
recovery_job finds the runs that ended without success, were tagged for an area and never
materialized it; reads back from SAN's rows what each wrote (each recovery's
`report_of_writes_at`); records that as a materialization of the area naming the dead run
(AUDIT_OF_RUN); and tags the dead run (`audited_tag`), so it is recorded once.
"""

from collections.abc import Iterator
from datetime import datetime

from dagster import AssetKey, DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter

# How many of the latest runs that ended without success a run looks through.
RUNS_LOOKED_AT = 20
ENDED_WITHOUT_SUCCESS = [DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]
# The metadata key of a materialization recorded for another run: that run's id.
AUDIT_OF_RUN = "audit_of_run"


def wrote_tag(area: str) -> str:
    """The run tag set before an area's first write: its write instant (ISO 8601)."""
    return f"batch_pipeline/wrote.{area}"


def audited_tag(area: str) -> str:
    """The tag a later run sets on a dead run once it recorded the area's audit: its own id."""
    return f"batch_pipeline/audited.{area}"


def materialized(instance: DagsterInstance, run_id: str, area: str) -> bool:
    records = instance.get_records_for_run(
        run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION
    ).records
    return any(
        record.event_log_entry.asset_materialization.asset_key == AssetKey(area)
        for record in records
    )


def unaudited_writes(
    instance: DagsterInstance, job_name: str, area: str
) -> Iterator[tuple[str, datetime]]:
    """(run id, write instant) of each recent run of `job_name` that ended without success
    after it began writing `area`, and whose writes of it no materialization records."""
    runs = instance.get_run_records(
        RunsFilter(job_name=job_name, statuses=ENDED_WITHOUT_SUCCESS), limit=RUNS_LOOKED_AT
    )
    for record in runs:
        tags = record.dagster_run.tags
        if wrote_tag(area) not in tags or audited_tag(area) in tags:
            continue
        if not materialized(instance, record.dagster_run.run_id, area):
            yield record.dagster_run.run_id, datetime.fromisoformat(tags[wrote_tag(area)])
