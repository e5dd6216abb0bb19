"""run_worker_watchdog, the operations domain's sensor: a run in flight whose process is gone
is ended (FAILURE, or CANCELED if it was being canceled); one whose process lives, that recorded
no process yet, or of another code location, is left; runs of other launchers are Dagster's run
monitoring's. Real processes and a real instance."""

import subprocess
import sys
import time

from dagster import DagsterRunStatus, build_sensor_context
from dagster._core.test_utils import instance_for_test

from batch_pipeline.operations.sensors import run_worker_watchdog
from batch_pipeline_tests.runs import a_process_that_has_exited, run_in_flight


def test_runs_whose_process_is_gone_are_ended_and_the_others_left():
    living = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    time.sleep(0.2)
    try:
        with instance_for_test() as instance:  # the local run launcher
            dead = run_in_flight(instance, a_process_that_has_exited())
            canceling = run_in_flight(
                instance, a_process_that_has_exited(), DagsterRunStatus.CANCELING
            )
            alive = run_in_flight(instance, living.pid)
            not_recorded = run_in_flight(instance, None)
            elsewhere = run_in_flight(instance, a_process_that_has_exited(), location="other")

            result = run_worker_watchdog(build_sensor_context(instance=instance))

            def status(run_id):
                return instance.get_run_by_id(run_id).status

            assert status(dead) == DagsterRunStatus.FAILURE
            assert status(canceling) == DagsterRunStatus.CANCELED
            for left in (alive, not_recorded, elsewhere):
                assert status(left) in (DagsterRunStatus.STARTED,)
            assert "ended 2 run(s)" in result.skip_message
            said = [
                record.event_log_entry.message
                for record in instance.get_records_for_run(dead).records
            ]
            assert any("is gone and no one reported the run ended" in line for line in said)
            again = run_worker_watchdog(build_sensor_context(instance=instance))
            assert again.skip_message == "every run in flight has its process"
    finally:
        living.kill()
        living.wait()


def test_runs_of_other_launchers_are_left_to_dagster_s_run_monitoring():
    overrides = {
        "run_launcher": {
            "module": "dagster._core.test_utils",
            "class": "MockedRunLauncher",
        }
    }
    with instance_for_test(overrides=overrides) as instance:
        dead = run_in_flight(instance, a_process_that_has_exited())
        result = run_worker_watchdog(build_sensor_context(instance=instance))
        assert "run monitoring" in result.skip_message
        assert instance.get_run_by_id(dead).status == DagsterRunStatus.STARTED
