"""Helpers for tests that start Dagster processes: a free port, starting them from the project
root, is the UI up, a storage database of their own, launching through the webserver. (Stopping
them and waiting for a condition: batch_pipeline.sandbox.processes, shared with the sandbox and
the benchmark.)"""

import socket
import subprocess
import sys
import urllib.request
import uuid
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from batch_pipeline.sandbox.processes import start_group, wait_for

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def start(command: list[str], env: dict, log) -> "subprocess.Popen":
    """A Dagster process (dagster-webserver, dagster-daemon, a code server) from the project
    root, in its own process group, its output in `log`; stop it with stop_group."""
    return start_group(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serving(base_url: str) -> bool:
    """Whether a Dagster webserver answers at base_url."""
    try:
        return urllib.request.urlopen(f"{base_url}/server_info", timeout=2).status == 200
    except OSError:
        return False


@contextmanager
def dagster_storage_database(server_url: str):
    """A PostgreSQL database of its own for a Dagster instance's storage, dropped afterwards;
    yields the DAGSTER_PG_* variables of deploy/dagster.prod.yaml that point at it."""
    admin = create_engine(server_url).execution_options(isolation_level="AUTOCOMMIT")
    name = f"bp_dagster_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    server = make_url(server_url)
    try:
        yield {
            "DAGSTER_PG_HOST": server.host or "127.0.0.1",
            "DAGSTER_PG_PORT": str(server.port or 5432),
            "DAGSTER_PG_USER": server.username or "postgres",
            "DAGSTER_PG_PASSWORD": server.password or "unused",
            "DAGSTER_PG_DB": name,
        }
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()


def launch_through_webserver(
    port: int, job_name: str, run_config: dict, timeout_s: float = 300
) -> tuple[str, str]:
    """Submit a run through the webserver's GraphQL API (retried while the code location is
    still loading), wait for it to end; returns (run id, final status)."""
    from dagster_graphql import DagsterGraphQLClient

    client = DagsterGraphQLClient("127.0.0.1", port_number=port)

    def submitted():
        try:
            return client.submit_job_execution(
                job_name, repository_location_name="batch_pipeline", run_config=run_config
            )
        except Exception:  # the code location may still be loading from the code server
            return None

    run_id = wait_for(submitted, 120, f"the webserver to launch {job_name}")
    status = wait_for(
        lambda: (
            (s := client.get_run_status(run_id).value) in ("SUCCESS", "FAILURE", "CANCELED") and s
        ),
        timeout_s,
        f"the {job_name} run to end",
        every_s=2,
    )
    return run_id, status
