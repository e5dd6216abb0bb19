"""`python -m batch_pipeline metrics`: serves until SIGTERM; a wrong URL or port is an error
that names it, at start."""

import os
import signal
import subprocess
import sys
import time
import urllib.request

from sqlalchemy import make_url

from batch_pipeline_tests.processes import ROOT, free_port


def first_page(process: subprocess.Popen, port: int) -> bytes:
    """/metrics once the process listens (it must not exit meanwhile)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as page:
                return page.read()
        except OSError:
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.5)


def metrics_command(port: int) -> list[str]:
    return [sys.executable, "-m", "batch_pipeline", "metrics", "--port", str(port)]


def first_page_then_sigterm(port: int, database_url: str, dagster_home) -> tuple[bytes, str]:
    """Start the command, read /metrics once, SIGTERM it: the page and what it printed (it must
    exit 0)."""
    process = subprocess.Popen(
        [*metrics_command(port), "--database-url", database_url],
        cwd=ROOT,
        env={**os.environ, "DAGSTER_HOME": str(dagster_home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        page = first_page(process, port)
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    return page, output


def refused(*arguments: str) -> subprocess.CompletedProcess:
    """The command with these arguments, which must exit 2 at start."""
    ran = subprocess.run(
        [*metrics_command(free_port()), *arguments],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 2 and "error:" in ran.stderr, ran.stderr
    return ran


def test_the_command_serves_until_sigterm_and_names_a_wrong_url(tmp_path, pg_db):
    port = free_port()
    page, output = first_page_then_sigterm(port, pg_db.url, tmp_path)
    assert b"batch_pipeline_san_up 1.0" in page
    assert f"http://127.0.0.1:{port}/metrics" in output

    assert "SAN_DATABASE_URL" in refused("--database-url", "mysql://nobody@127.0.0.1/san").stderr
    missing = make_url(pg_db.url).set(database="no_such_san_database", query={})
    no_database = refused("--database-url", missing.render_as_string(hide_password=False))
    assert 'database "no_such_san_database" does not exist' in no_database.stderr
    assert "fix the database name" in no_database.stderr
    assert "'70000' is not a port" in refused("--port", "70000").stderr


def test_a_server_that_is_down_at_start_is_served_as_san_up_0(tmp_path):
    """Down is not wrong: the endpoint starts and says so on every scrape until SAN is back."""
    down = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/san"
    page, output = first_page_then_sigterm(free_port(), down, tmp_path)
    assert b"batch_pipeline_san_up 0.0" in page
    assert "Connection refused" in output and "serving batch_pipeline_san_up 0" in output
