"""Runs whose process is gone while Dagster still shows them in flight.

With the local run launcher (deploy/dagster.prod.yaml, `make run`), a run is a child process
of the code server, and only the code server ends a run whose process died: it checks its
children every few seconds and reports the run FAILURE. That check gives up for good when
Dagster's storage refuses it at that moment (its thread dies with the error), and nothing
checks when the code server died with its run: the run stays STARTED until its
`dagster/max_runtime` (1 h) and the cancel timeout, and holds recovery_job's one slot.
Dagster's run monitoring checks a run's worker only for launchers that can (Docker,
Kubernetes), not for local processes.

So a sensor of this code location (it runs in the code server, on the runs' host) looks at
this location's runs in flight, finds each one's process by the pid Dagster recorded when it
started ("Started process for run (pid: N)"), and reports the run ended when no process with
that pid has run since then: FAILURE, or CANCELED for a run being canceled. The next
recovery_job run then audits what it wrote (recovery/dead_runs.py).
"""

import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

from dagster import (
    DagsterEventType,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    DefaultRunLauncher,
    RunsFilter,
)

LOCATION_NAME = "batch_pipeline"
IN_FLIGHT = [DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]
# How often the sensor looks: a run whose process died ends within about this long.
CHECK_EVERY = timedelta(seconds=30)
# The pid is recorded by the run's process once it is up: a process with that pid that started
# later than this before the record is another one (the pid was reused).
STARTUP_ALLOWANCE = timedelta(seconds=1)
RUNS_LOOKED_AT = 100


@dataclass(frozen=True)
class RunWorker:
    run: DagsterRun
    pid: int
    recorded_at: float  # when the run's process recorded its pid (epoch seconds)


def watches_local_processes(instance: DagsterInstance) -> bool:
    """Only the local launcher runs each run as a process of this host."""
    return isinstance(instance.run_launcher, DefaultRunLauncher)


def runs_in_flight(instance: DagsterInstance) -> list[DagsterRun]:
    records = instance.get_run_records(RunsFilter(statuses=IN_FLIGHT), limit=RUNS_LOOKED_AT)
    return [
        record.dagster_run
        for record in records
        if record.dagster_run.remote_job_origin is not None
        and record.dagster_run.remote_job_origin.location_name == LOCATION_NAME
    ]


def run_worker(instance: DagsterInstance, run: DagsterRun) -> RunWorker | None:
    """The run's process as Dagster recorded it, or None (not recorded yet)."""
    records = instance.get_records_for_run(
        run.run_id, of_type=DagsterEventType.ENGINE_EVENT, ascending=False
    ).records
    for record in records:
        entry = record.event_log_entry
        data = entry.dagster_event.engine_event_data if entry.dagster_event else None
        pid = data.metadata.get("pid") if data is not None else None
        if pid is not None and str(pid.value).isdigit():
            return RunWorker(run, int(pid.value), entry.timestamp)
    return None


def process_started_at(pid: int) -> float | None:
    """When the process `pid` of this host started (epoch seconds), or None if there is none."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        with open("/proc/stat") as system:
            boot = next(int(line.split()[1]) for line in system if line.startswith("btime"))
    except (FileNotFoundError, ProcessLookupError):
        return None
    # field 22 of stat (the 20th after the name): start time in clock ticks since boot
    return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")


def is_gone(worker: RunWorker) -> bool:
    """No process with the worker's pid, or only one that started after the pid was recorded."""
    started = process_started_at(worker.pid)
    return started is None or started > worker.recorded_at + STARTUP_ALLOWANCE.total_seconds()


def gone_run_workers(instance: DagsterInstance) -> Iterator[RunWorker]:
    for run in runs_in_flight(instance):
        worker = run_worker(instance, run)
        if worker is not None and is_gone(worker):
            yield worker


def end_run(instance: DagsterInstance, worker: RunWorker) -> DagsterRunStatus:
    """Report the run ended as Dagster's own check would have: FAILURE, or CANCELED if it was
    being canceled."""
    run = instance.get_run_by_id(worker.run.run_id) or worker.run
    said = (
        f"The run's process (pid {worker.pid}) is gone and no one reported the run ended "
        "(batch_pipeline's run_worker_watchdog)."
    )
    if run.status == DagsterRunStatus.CANCELING:
        instance.report_run_canceled(run, said)
        return DagsterRunStatus.CANCELED
    instance.report_run_failed(run, said)
    return DagsterRunStatus.FAILURE
