"""`python -m batch_pipeline metrics`: the endpoint as a process of its own, beside the webserver
and the daemon (it reads the same DAGSTER_HOME and SAN_DATABASE_URL), so a dead daemon is seen
on it instead of hiding with it.

prometheus_client's WSGI app behind a server of our own: its `start_http_server` keeps an idle
connection's thread forever, listens with the standard library's backlog of 5 and answers 200
on every path."""

import logging
import os
import signal
import socket
import threading
from wsgiref.simple_server import WSGIRequestHandler, make_server

from dagster import DagsterInstance
from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.process_collector import ProcessCollector

from batch_pipeline.doctor import connection_fix
from batch_pipeline.monitoring.exporter import HealingCollector
from batch_pipeline.san.database import (
    SanConnectionError,
    check_connection,
    create_san_engine,
    redacted,
)
from batch_pipeline.san.timezone import san_timezone_name

log = logging.getLogger(__name__)

METRICS_PATH = "/metrics"
# A connection that sends nothing for this long is closed, and its thread ends with it.
IDLE_CONNECTION_TIMEOUT_SECONDS = 10
# Connections the kernel holds while every thread is busy accepting (the default is 5).
LISTEN_BACKLOG = 1024
# What a refused connection says when the server is only down or busy: the endpoint starts and
# reports `batch_pipeline_san_up 0` until it answers. Any other refusal names a wrong URL.
SERVER_DOWN_SYMPTOMS = (
    "Connection refused",
    "timeout expired",
    "the database system is",  # starting up, shutting down, in recovery mode
    "too many clients",
)


def instance_opener():
    """DagsterInstance.get(), opened on first use and kept; a failure is retried next scrape."""
    opened: list[DagsterInstance] = []

    def instance() -> DagsterInstance:
        if not opened:
            if not os.environ.get("DAGSTER_HOME"):
                raise RuntimeError("DAGSTER_HOME is not set: no Dagster instance to read")
            opened.append(DagsterInstance.get())
        return opened[0]

    return instance


def registry_for(collector: HealingCollector) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(collector)
    ProcessCollector(registry=registry)  # the endpoint's own CPU, memory and start time
    return registry


def metrics_app(registry: CollectorRegistry):
    """The exposition on /metrics; 404 on any other path, so a typo is seen, not scraped."""
    exposition = make_wsgi_app(registry)

    def app(environ, start_response):
        if environ.get("PATH_INFO") == METRICS_PATH:
            return exposition(environ, start_response)
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [f"batch_pipeline serves its metrics on {METRICS_PATH}\n".encode()]

    return app


class IdleClosingHandler(WSGIRequestHandler):
    timeout = IDLE_CONNECTION_TIMEOUT_SECONDS  # socket timeout: an idle client is let go

    def log_message(self, format, *args):  # noqa: A002 - a scrape every 15 s is not news
        pass


def start_server(registry: CollectorRegistry, host: str, port: int):
    """Serve the registry on host:port in a daemon thread; returns the server and the thread."""

    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]

    class Server(ThreadingWSGIServer):
        request_queue_size = LISTEN_BACKLOG
        address_family = family

    server = make_server(host, port, metrics_app(registry), Server, IdleClosingHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True, name="metrics-http")
    thread.start()
    return server, thread


def checked_engine(database_url: str):
    """The SAN engine, refused at start when the server says the URL itself is wrong (a missing
    database or role, a wrong password); a server that is down is only logged."""
    engine = create_san_engine(database_url)
    try:
        check_connection(engine)
    except SanConnectionError as error:
        if not any(symptom.lower() in str(error).lower() for symptom in SERVER_DOWN_SYMPTOMS):
            engine.dispose()
            raise SanConnectionError(f"{error} ({connection_fix(str(error))})") from error
        log.warning("metrics: %s; serving batch_pipeline_san_up 0 until it answers", error)
    return engine


def serve(database_url: str, host: str, port: int, cache_seconds: float) -> int:
    """Serve /metrics until SIGTERM or SIGINT. A wrong URL is an error now; a database that is
    down is `batch_pipeline_san_up 0` on every scrape until it is back."""
    engine = checked_engine(database_url)
    collector = HealingCollector(engine, instance_opener(), san_timezone_name(), cache_seconds)
    server, thread = start_server(registry_for(collector), host, port)
    print(
        f"batch_pipeline metrics on http://{host}:{port}{METRICS_PATH} "
        f"(SAN {redacted(engine.url)}, DAGSTER_HOME {os.environ.get('DAGSTER_HOME') or 'unset'}, "
        f"cached {cache_seconds:g} s)",
        flush=True,
    )
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()
    server.shutdown()
    thread.join(timeout=5)
    engine.dispose()
    return 0
