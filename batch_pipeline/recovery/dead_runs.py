"""Which audit entry lists which writes: the one rule retries, re-executions and dead runs follow.

Every row an area writes carries its write instant (recovery/plan.py, WRITE_INSTANT), and the
run is tagged with it before its first write (`wrote_tag`). The rule: **the writes at one
instant are listed by exactly one audit entry** (a materialization of the area).

- A run writes at its detection's instant (`instant_to_write_at`). A retry of the step keeps
  it, and its report lists what earlier attempts wrote at it, recognised in SAN's rows.
- A re-execution from failure reloads its parent's detection, and so its instant: it lists the
  parent's writes at it too (the parent is then tagged audited by it, `audited_tag`), unless
  an audit already lists them (a later run recorded the parent as dead): then it writes at an
  instant of its own.
- A run that ended without listing its writes (SIGKILL, out of memory, Terminate, a lost
  host) is read back from SAN's rows by a later run, one entry per instant whatever the number
  of runs that wrote at it (`unaudited_writes`), naming the run (AUDIT_OF_RUN).
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime

from dagster import (
    AssetKey,
    DagsterEventType,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    RunsFilter,
)

# How many of the latest runs that ended without success a run looks through.
RUNS_LOOKED_AT = 20
ENDED_WITHOUT_SUCCESS = [DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]
# The metadata key of a materialization recorded for another run: that run's id.
AUDIT_OF_RUN = "audit_of_run"
# ... and every run that wrote at the instant it lists, when more than one did (a re-execution).
AUDIT_OF_RUNS = "audit_of_runs"


def wrote_tag(area: str) -> str:
    """The run tag set before an area's first write: its write instant (ISO 8601)."""
    return f"batch_pipeline/wrote.{area}"


def audited_tag(area: str) -> str:
    """The tag set on a run whose writes of the area another run's audit lists: that run's id."""
    return f"batch_pipeline/audited.{area}"


def materialized(instance: DagsterInstance, run_id: str, area: str) -> bool:
    records = instance.get_records_for_run(
        run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION
    ).records
    return any(
        record.event_log_entry.asset_materialization.asset_key == AssetKey(area)
        for record in records
    )


def runs_that_wrote_at(
    instance: DagsterInstance, job_name: str, area: str, instant: datetime
) -> list[DagsterRun]:
    """The runs tagged with `instant` for the area, oldest first."""
    records = instance.get_run_records(
        RunsFilter(job_name=job_name, tags={wrote_tag(area): instant.isoformat()}),
        limit=RUNS_LOOKED_AT,
    )
    return [record.dagster_run for record in sorted(records, key=lambda r: r.create_timestamp)]


def listed_by_an_audit(instance: DagsterInstance, runs: list[DagsterRun], area: str) -> bool:
    """Whether an audit entry lists the writes of `runs` (all at one instant): one of them
    materialized the area, or a run outside them recorded their audit. A tag set by one of
    them (a re-execution covering its parent) counts only through that run's materialization."""
    ids = {run.run_id for run in runs}
    recorded_outside = any(
        run.tags[audited_tag(area)] not in ids for run in runs if audited_tag(area) in run.tags
    )
    return recorded_outside or any(materialized(instance, run.run_id, area) for run in runs)


@dataclass(frozen=True)
class WriteInstant:
    """The instant a run writes an area at, and the other runs whose writes at it its audit
    lists (a re-execution's parent)."""

    instant: datetime
    lists_writes_of: list[str]


def instant_to_write_at(
    instance: DagsterInstance,
    run: DagsterRun,
    area: str,
    detected_at: datetime | None,
    now: Callable[[], datetime],
) -> WriteInstant:
    """The instant `run` writes `area` at (the module's rule): its own tag's on a retry, else its
    detection's, unless other runs wrote at that one and an audit already lists it; `now()`
    when there is no detection instant or it is taken."""
    own = run.tags.get(wrote_tag(area))
    instant = datetime.fromisoformat(own) if own else detected_at
    if instant is None:
        return WriteInstant(now(), [])
    others = [
        other
        for other in runs_that_wrote_at(instance, run.job_name, area, instant)
        if other.run_id != run.run_id and other.is_finished
    ]
    if own is None and others and listed_by_an_audit(instance, others, area):
        return WriteInstant(now(), [])
    return WriteInstant(instant, [other.run_id for other in others])


@dataclass(frozen=True)
class UnauditedWrites:
    """Writes at one instant that no audit lists, by runs that all ended (oldest first)."""

    instant: datetime
    run_ids: list[str]


def unaudited_writes(
    instance: DagsterInstance, job_name: str, area: str, own_instant: datetime | None
) -> Iterator[UnauditedWrites]:
    """Each instant of recent runs of `job_name` that ended without success after writing
    `area` whose writes no audit lists; not `own_instant` (the caller's audit lists those), nor
    one a run still in flight writes at (its own audit will)."""
    dead = instance.get_run_records(
        RunsFilter(job_name=job_name, statuses=ENDED_WITHOUT_SUCCESS), limit=RUNS_LOOKED_AT
    )
    instants = {
        record.dagster_run.tags[wrote_tag(area)]
        for record in dead
        if wrote_tag(area) in record.dagster_run.tags
        and audited_tag(area) not in record.dagster_run.tags
    }
    for tagged in sorted(instants):
        instant = datetime.fromisoformat(tagged)
        if instant == own_instant:
            continue
        runs = runs_that_wrote_at(instance, job_name, area, instant)
        if all(run.is_finished for run in runs) and not listed_by_an_audit(instance, runs, area):
            yield UnauditedWrites(instant, [run.run_id for run in runs])
