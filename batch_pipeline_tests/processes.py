"""Helpers for tests that start Dagster processes: a free port, starting them from the project
root, is the UI up, a storage database of their own, launching through the webserver. (Stopping
them and waiting for a condition: san_sandbox.processes, shared with the sandbox and
the benchmark.)"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from dagster import DagsterInstance
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from san_sandbox.processes import start_group, stop_group, wait_for

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def ignore_sigint() -> None:
    """For `preexec_fn`: what a non-interactive shell does to a command it starts with `&`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def start(command: list[str], env: dict, log) -> "subprocess.Popen":
    """A Dagster process (dagster-webserver, dagster-daemon, a code server) from the project
    root, in its own process group, its output in `log`; stop it with stop_group."""
    return start_group(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def sandbox_ui(port: int, *flags: str) -> list[str]:
    """`make run`'s command: dagster dev on 127.0.0.1:`port` beside the living sandbox."""
    command = [sys.executable, "-m", "san_sandbox", "ui", *flags, "--"]
    return command + ["-h", "127.0.0.1", "-p", str(port)]


def run_home(parent: Path) -> Path:
    """A DAGSTER_HOME as `make run` makes it: ./dagster.yaml linked into it."""
    home = parent / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").symlink_to(ROOT / "dagster.yaml")
    return home


def sandbox_env(data_dir: Path, **extra: str) -> dict:
    """This environment as `make run` sees it on the embedded default: no SAN database, no
    dispatcher, cron or zone of the caller's; the sandbox's data in `data_dir`."""
    # the metrics endpoint beside the UI on a port of its own (two tests run at once)
    env = {**os.environ, "SAN_DATA_DIR": str(data_dir), "METRICS_PORT": str(free_port()), **extra}
    for name in ("SAN_DATABASE_URL", "SAN_JOB_DISPATCHER", "SAN_TIMEZONE", "SAN_RECOVERY_CRON"):
        env.pop(name, None)
    return env


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


def code_server_serves(port: int, host: str = "127.0.0.1") -> bool:
    """`dagster api grpc-health-check`: the code server's own answer."""
    check = subprocess.run(
        [str(BIN / "dagster"), "api", "grpc-health-check", "--host", host, "--port", str(port)],
        capture_output=True,
        timeout=30,
    )
    return check.returncode == 0


def graphql_client(port: int):
    from dagster_graphql import DagsterGraphQLClient

    return DagsterGraphQLClient("127.0.0.1", port_number=port)


def submit_through_webserver(
    port: int, job_name: str, run_config: dict, tags: dict | None = None
) -> str:
    """Submit a run through the webserver's GraphQL API (retried while the code location is
    still loading); its run id."""
    client = graphql_client(port)

    def submitted():
        try:
            return client.submit_job_execution(
                job_name,
                repository_location_name="batch_pipeline",
                run_config=run_config,
                tags=tags,
            )
        except Exception:  # the code location may still be loading from the code server
            return None

    return wait_for(submitted, 120, f"the webserver to launch {job_name}")


def run_status(port: int, run_id: str) -> str | None:
    """The run's status, or None if the webserver dropped the request (seen once, under load,
    while the daemon restarted: a poll asks again rather than failing the whole walk-through)."""
    from dagster_graphql import DagsterGraphQLClientError

    try:
        return graphql_client(port).get_run_status(run_id).value
    except DagsterGraphQLClientError as error:
        if connection_dropped(error):
            return None
        raise


def connection_dropped(error: BaseException | None) -> bool:
    """Whether `error`, or one it was raised from, is a refused or aborted connection: the
    client wraps the connection's error in one whose message does not say so."""
    while error is not None:
        if isinstance(error, ConnectionError) or any(
            words in str(error) for words in ("Connection aborted", "Connection refused")
        ):
            return True
        error = error.__cause__ or error.__context__
    return False


def wait_for_status(port: int, run_id: str, statuses, timeout_s: float) -> str:
    return wait_for(
        lambda: (s := run_status(port, run_id)) in statuses and s,
        timeout_s,
        f"run {run_id} to reach {'/'.join(statuses)}",
        every_s=1,
    )


def launch_through_webserver(
    port: int, job_name: str, run_config: dict, timeout_s: float = 300, tags: dict | None = None
) -> tuple[str, str]:
    """Submit a run through the webserver's GraphQL API and wait for it to end; returns (run
    id, final status)."""
    run_id = submit_through_webserver(port, job_name, run_config, tags)
    return run_id, wait_for_status(port, run_id, ("SUCCESS", "FAILURE", "CANCELED"), timeout_s)


@contextmanager
def san_database_of_its_own(server_url: str):
    """A PostgreSQL database of its own with the SAN app's DDL in its public schema (a pooler
    passes no search_path option on), dropped afterwards; yields its name."""
    from san_sandbox.app_schema import APP_DDL

    admin = create_engine(server_url).execution_options(isolation_level="AUTOCOMMIT")
    name = f"bp_san_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    own = create_engine(make_url(server_url).set(database=name))
    try:
        with own.begin() as conn:
            conn.exec_driver_sql(APP_DDL.read_text())
        yield name
    finally:
        own.dispose()
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()


# PgBouncer in transaction mode, as SAN may run it in front of its database: each transaction
# of a client may get another server connection. server_round_robin makes that the rule rather
# than luck (the default reuses the connection a client just released while it is idle).
PGBOUNCER_SETTINGS = """\
[databases]
san = host={host} port={port} dbname={database} user={user}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen_port}
auth_type = any
pool_mode = transaction
server_round_robin = 1
default_pool_size = {server_connections}
unix_socket_dir =
"""


@contextmanager
def pgbouncer(server_url: str, database: str, folder: Path):
    """A real PgBouncer (Debian's package) in transaction mode in front of `database`, on a port
    of its own; yields the SQLAlchemy URL of the database through it. Started as the postgres
    user when this is root (PgBouncer refuses to run as root)."""
    server = make_url(server_url)
    listen_port = free_port()
    settings = folder / "pgbouncer.ini"
    settings.write_text(
        PGBOUNCER_SETTINGS.format(
            host=server.host or "127.0.0.1",
            port=server.port or 5432,
            database=database,
            user=server.username or "postgres",
            listen_port=listen_port,
            server_connections=SERVER_CONNECTIONS,
        )
    )
    as_user = ["-u", "postgres"] if os.geteuid() == 0 else []
    log_path = folder / "pgbouncer.log"
    with open(log_path, "wb") as log:
        bouncer = start_group([PGBOUNCER, *as_user, str(settings)], stdout=log, stderr=log)
    try:
        wait_for(
            lambda: bouncer.poll() is not None or _accepts(listen_port),
            30,
            f"PgBouncer on port {listen_port}",
            every_s=0.2,
        )
        assert bouncer.poll() is None, f"PgBouncer did not start: {log_path.read_text()}"
        url = f"postgresql+psycopg://{server.username or 'postgres'}@127.0.0.1:{listen_port}/san"
        _open_server_connections(url, SERVER_CONNECTIONS)
        yield url
    finally:
        stop_group(bouncer, grace_s=10)


# Debian's package puts it in /usr/sbin, which a non-root PATH may lack.
PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
# Server connections PgBouncer keeps open: with several idle ones and round robin, a client's
# transactions run on one after another, never twice in a row on the same.
SERVER_CONNECTIONS = 3


def _open_server_connections(url: str, count: int) -> None:
    """Make PgBouncer open `count` server connections now (clients in a transaction at once),
    so round robin has them from the first transaction on."""
    engine = create_engine(url, pool_size=count)
    try:
        held = [engine.connect() for _ in range(count)]
        for conn in held:
            conn.execute(text("SELECT 1"))  # each holds a server connection until its commit
        for conn in held:
            conn.close()
    finally:
        engine.dispose()


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


class Deployment(NamedTuple):
    home: Path  # DAGSTER_HOME
    port: int  # the webserver's
    log: Path
    env: dict  # the processes' environment (for another process beside them)
    daemon: subprocess.Popen


@contextmanager
def production_deployment(tmp_path: Path, pg_db, storage: dict, **settings: str):
    """dagster-daemon and dagster-webserver on deploy/dagster.prod.yaml, healing `pg_db`."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "deploy" / "dagster.prod.yaml", home / "dagster.yaml")
    env = {
        **os.environ,
        **storage,
        "DAGSTER_HOME": str(home),
        "SAN_DATABASE_URL": pg_db.url,
        "SAN_JOB_DISPATCHER": "none",
        **settings,
    }
    # Create Dagster's storage schema once, before two processes race to create it on an empty
    # database (one of them failed here with 'type "run_tags" already exists').
    DagsterInstance.from_config(str(home)).dispose()
    port = free_port()
    log_path = tmp_path / "dagster.log"
    log = open(log_path, "w")
    daemon = start([str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"], env, log)
    webserver = start(
        [
            str(BIN / "dagster-webserver"),
            "-w",
            "workspace.yaml",
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
        ],
        env,
        log,
    )
    try:
        yield Deployment(home, port, log_path, env, daemon)
    finally:
        stop_group(webserver)
        stop_group(daemon)
        log.close()


# deploy/prometheus: the alert rules and configs, and the tools of Debian's prometheus and
# prometheus-alertmanager packages that check and run them (.ci/run installs both).
PROMETHEUS = ROOT / "deploy" / "prometheus"


def tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} not found: `apt-get install prometheus prometheus-alertmanager`"
    return path
