"""python -m bench.launch [--runs N]: what a user feels, a run launched through a real instance.

On the demo SAN database (SQLite, as `make run` makes it) and a Dagster instance of its own
(this repository's dagster.yaml: the queued run coordinator), with the real daemon:
- fast_heal_job and recovery_job runs submitted with `dagster job launch` (the same path as a
  sensor's or a schedule's request and the Launchpad: the run queue, the daemon's dequeue, a
  run worker process), from submission to RUN_SUCCESS (the run record's creation to its end);
and, beside them, the same jobs through execute_in_process in this process. Prints a table;
the last line is machine-readable:

    launch fast_heal_p50_s=X recovery_p50_s=Y in_process_fast_heal_s=A in_process_recovery_s=B
"""

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from batch_pipeline.definitions import defs
from batch_pipeline.san.database import create_san_engine
from batch_pipeline.san.resources import JobDispatcherResource, SanDatabase
from bench.runner import bench_parser
from san_sandbox.demo import seed_demo_state
from san_sandbox.processes import wait_for

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def finished_runs(instance, job_name: str):

    return instance.get_run_records(
        RunsFilter(
            job_name=job_name,
            statuses=[
                DagsterRunStatus.SUCCESS,
                DagsterRunStatus.FAILURE,
                DagsterRunStatus.CANCELED,
            ],
        )
    )


def seconds_to_end(records) -> list[float]:
    failed = [r.dagster_run.run_id for r in records if r.dagster_run.status.value != "SUCCESS"]
    if failed:
        raise SystemExit(f"runs failed: {failed} (see the instance's event log)")
    return sorted(r.end_time - r.create_timestamp.timestamp() for r in records)


def in_process_seconds(job_name: str, database_url: str, runs: int) -> list[float]:

    job = defs.resolve_job_def(job_name)
    timings = []
    for _ in range(runs):
        started = time.perf_counter()
        result = job.execute_in_process(
            resources={
                "san_database": SanDatabase(url=database_url),
                "job_dispatcher": JobDispatcherResource(),
            },
            instance=DagsterInstance.ephemeral(),
            raise_on_error=True,
        )
        assert result.success
        timings.append(time.perf_counter() - started)
    return timings


def main(argv=None) -> int:
    parser = bench_parser("python -m bench.launch", __doc__)
    parser.add_argument(
        "--runs", type=int, default=3, help="runs of each job (default %(default)s)"
    )
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="bench_launch_"))
    home = work / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    database_url = f"sqlite:///{work / 'san.sqlite'}"
    engine = create_san_engine(database_url)
    seed_demo_state(engine)
    engine.dispose()
    env = {**os.environ, "DAGSTER_HOME": str(home), "SAN_DATABASE_URL": database_url}
    env.pop("SAN_JOB_DISPATCHER", None)
    workspace = ["-w", str(REPO / "workspace.yaml")]
    # Only the runs this benchmark asks for: no schedule or sensor may launch one in between.
    subprocess.run(
        [BIN / "dagster", "schedule", "stop", "recovery_schedule", *workspace],
        env=env,
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [BIN / "dagster", "sensor", "stop", "fast_heal_sensor", *workspace],
        env=env,
        check=True,
        capture_output=True,
    )
    log = open(work / "daemon.log", "wb")
    daemon = subprocess.Popen(
        [BIN / "dagster-daemon", "run", *workspace],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=REPO,
        start_new_session=True,
    )
    try:
        with DagsterInstance.from_config(str(home)) as instance:
            launched = {}
            for job_name in ("fast_heal_job", "recovery_job"):
                for number in range(args.runs):
                    subprocess.run(
                        [BIN / "dagster", "job", "launch", "-j", job_name, *workspace],
                        env=env,
                        check=True,
                        capture_output=True,
                        cwd=REPO,
                    )
                    wait_for(
                        lambda job_name=job_name, number=number: (
                            len(finished_runs(instance, job_name)) > number
                        ),
                        180,
                        f"a {job_name} run",
                        every_s=0.5,
                    )
                launched[job_name] = seconds_to_end(finished_runs(instance, job_name))
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
        log.close()
    in_fast = in_process_seconds("fast_heal_job", database_url, args.runs)
    in_recovery = in_process_seconds("recovery_job", database_url, args.runs)
    shutil.rmtree(work, ignore_errors=True)
    print(f"\n{'job':<16}{'daemon: request -> success (s)':>34}{'execute_in_process (s)':>26}")
    fast, recovery = launched["fast_heal_job"], launched["recovery_job"]
    for name, by_daemon, in_process in (
        ("fast_heal_job", fast, in_fast),
        ("recovery_job", recovery, in_recovery),
    ):
        print(
            f"{name:<16}{' / '.join(f'{s:.1f}' for s in by_daemon):>34}"
            f"{' / '.join(f'{s:.2f}' for s in in_process):>26}"
        )
    print(
        f"launch fast_heal_p50_s={statistics.median(fast):.1f} "
        f"recovery_p50_s={statistics.median(recovery):.1f} "
        f"in_process_fast_heal_s={statistics.median(in_fast):.2f} "
        f"in_process_recovery_s={statistics.median(in_recovery):.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
