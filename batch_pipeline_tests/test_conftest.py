"""The suite's own set-up (conftest.py): a suite started with SIGINT ignored still lets its
tests stop the processes they start."""

import subprocess
import sys

from batch_pipeline_tests.processes import ROOT, ignore_sigint

# Runs a one-op Dagster job in-process, then reads which signals a new process ignores.
INNER_TEST = """
import signal
import subprocess

from dagster import job, op


@op
def nothing():
    return None


@job
def one_op():
    nothing()


def test_a_process_started_after_a_dagster_run_can_be_terminated():
    assert one_op.execute_in_process().success
    status = subprocess.run(["cat", "/proc/self/status"], capture_output=True, text=True).stdout
    ignored = int(status.split("SigIgn:")[1].split()[0], 16)
    assert not ignored & (1 << (signal.SIGTERM - 1)), f"SIGTERM ignored: {ignored:#x}"
"""


def test_a_suite_started_with_sigint_ignored_starts_processes_sigterm_can_stop(tmp_path):
    """Dagster sets SIGTERM to SIGINT's handler after an in-process run: with SIGINT ignored
    (the suite started by `.ci/run &`), every process a test starts afterwards would ignore
    SIGTERM, and the tests that stop one (pgbench, `make run`, a health check's kill) hang."""
    (tmp_path / "test_inner.py").write_text(INNER_TEST)
    inner = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
         "batch_pipeline_tests.conftest", "--rootdir", str(tmp_path), "-c", "/dev/null",
         str(tmp_path / "test_inner.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=ignore_sigint,
    )  # fmt: skip
    assert inner.returncode == 0, inner.stdout[-3000:] + inner.stderr[-3000:]
