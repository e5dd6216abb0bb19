"""`python -m batch_pipeline metrics`: serves until SIGTERM; a wrong URL or port is an error
that names it, at start."""

import os
import signal
import subprocess
import sys
import time
import urllib.request

from batch_pipeline_tests.processes import ROOT, free_port


def test_the_command_serves_until_sigterm_and_names_a_wrong_url(tmp_path, pg_db):
    port = free_port()
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}
    command = [sys.executable, "-m", "batch_pipeline", "metrics", "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--database-url", pg_db.url],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
                break
            except OSError:
                assert time.monotonic() < deadline and process.poll() is None
                time.sleep(0.5)
        assert b"batch_pipeline_san_up 1.0" in page.read()
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    assert f"http://127.0.0.1:{port}/metrics" in output

    wrong = subprocess.run(
        [*command, "--database-url", "mysql://nobody@127.0.0.1/san"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert wrong.returncode == 2 and "error:" in wrong.stderr and "SAN_DATABASE_URL" in wrong.stderr
    bad_port = subprocess.run(
        [*command[:-1], "70000"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert bad_port.returncode == 2 and "'70000' is not a port" in bad_port.stderr
