"""Child processes of the sandbox's commands, its experiments, the benchmark and the tests:
started in a process group of their own, waited for, and stopped as a group. One copy."""

import os
import signal
import subprocess
import time
from collections.abc import Callable


def default_signals() -> None:
    """For `preexec_fn`: SIGINT and SIGTERM back to their defaults. A process started from a
    background shell inherits them ignored, and would then ignore the stop it is sent."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def start_group(command: list[str], **popen) -> subprocess.Popen:
    """`command` in a new session (its own process group), stoppable with stop_group."""
    return subprocess.Popen(command, start_new_session=True, preexec_fn=default_signals, **popen)


def stop_group(
    process: subprocess.Popen, first: signal.Signals = signal.SIGTERM, grace_s: float = 30.0
) -> int:
    """`first` to the process's whole group (SIGINT: what Ctrl-C does in a terminal; SIGTERM:
    what systemd and `docker stop` send), SIGKILL to whatever of the group is left after
    `grace_s`; the leader's exit code."""
    try:
        os.killpg(process.pid, first)
        return process.wait(grace_s)
    except ProcessLookupError:
        return process.wait()
    except subprocess.TimeoutExpired:
        _kill_group(process)
        return process.wait()
    finally:
        _kill_group(process)  # children that outlived their leader


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def wait_for(condition: Callable, timeout_s: float, what: str, every_s: float = 2.0):
    """Poll `condition` until it returns something truthy (returned), or fail naming `what`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every_s)
    raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
