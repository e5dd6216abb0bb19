"""Child processes: a whole group stops, children included; waiting names what it waited for."""

import signal
import subprocess
import sys
import time

import pytest

from san_sandbox.processes import start_group, stop_group, wait_for

# A parent that starts a child and both sleep: a stop must reach the child too.
FAMILY = (
    "import subprocess, sys, time; "
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
    "print(child.pid, flush=True); time.sleep(600)"
)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("first", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_reaches_the_whole_group(first):
    process = start_group([sys.executable, "-c", FAMILY], stdout=subprocess.PIPE, text=True)
    child = int(process.stdout.readline())
    started = time.monotonic()
    code = stop_group(process, first, grace_s=10)
    assert code != 0 and time.monotonic() - started < 10
    wait_for(lambda: not alive(child), 5, "the child to be gone", every_s=0.1)


def test_a_group_that_ignores_the_first_signal_is_killed_after_the_grace():
    ignores = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    process = start_group([sys.executable, "-c", ignores])
    time.sleep(0.5)  # let it install its handler
    assert stop_group(process, signal.SIGTERM, grace_s=1) == -signal.SIGKILL


def test_waiting_returns_the_value_or_names_what_it_waited_for():
    assert wait_for(lambda: 42, 1, "an answer", every_s=0.01) == 42
    with pytest.raises(TimeoutError, match="waiting for the impossible"):
        wait_for(lambda: None, 0.2, "the impossible", every_s=0.05)
