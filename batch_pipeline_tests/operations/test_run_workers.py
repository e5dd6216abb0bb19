"""The run worker's liveness: no process with the recorded pid, or one that started after the
pid was recorded (the pid was reused), is gone."""

import subprocess
import sys
import time

from dagster import DagsterRun
from dagster._core.utils import make_new_run_id

from batch_pipeline.operations.run_workers import RunWorker, is_gone, process_started_at


def test_a_pid_taken_by_a_later_process_is_not_the_run_s():
    living = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = process_started_at(living.pid)
        assert started is not None and abs(started - time.time()) < 60
        run = DagsterRun(job_name="recovery_job", run_id=make_new_run_id())
        assert not is_gone(RunWorker(run, living.pid, recorded_at=time.time()))
        # recorded before this process started: the pid was the run's, now another's
        assert is_gone(RunWorker(run, living.pid, recorded_at=started - 60))
    finally:
        living.kill()
        living.wait()
    assert process_started_at(living.pid) is None
    assert is_gone(RunWorker(run, living.pid, recorded_at=time.time()))
