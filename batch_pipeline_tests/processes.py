"""Helpers for tests that start Dagster processes: a free port, polling, is the UI up."""

import socket
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition, timeout_s: float, what: str, every_s: float = 2.0):
    """Poll `condition` until it returns something truthy (returned), or fail naming `what`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def serving(base_url: str) -> bool:
    """Whether a Dagster webserver answers at base_url."""
    try:
        return urllib.request.urlopen(f"{base_url}/server_info", timeout=2).status == 200
    except OSError:
        return False
