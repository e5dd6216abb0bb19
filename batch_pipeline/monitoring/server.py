"""`python -m batch_pipeline metrics`: the endpoint as a process of its own, beside the webserver
and the daemon (it reads the same DAGSTER_HOME and SAN_DATABASE_URL), so a dead daemon is seen
on it instead of hiding with it."""

import logging
import os
import signal
import threading

from dagster import DagsterInstance
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.process_collector import ProcessCollector

from batch_pipeline.monitoring.exporter import HealingCollector
from batch_pipeline.san.database import create_san_engine, redacted
from batch_pipeline.san.timezone import san_timezone_name

log = logging.getLogger(__name__)


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


def serve(database_url: str, host: str, port: int, cache_seconds: float) -> int:
    """Serve /metrics until SIGTERM or SIGINT. A wrong URL is an error now; a database that is
    down is `batch_pipeline_san_up 0` on every scrape until it is back."""
    engine = create_san_engine(database_url)
    collector = HealingCollector(engine, instance_opener(), san_timezone_name(), cache_seconds)
    server, thread = start_http_server(port, addr=host, registry=registry_for(collector))
    print(
        f"batch_pipeline metrics on http://{host}:{port}/metrics (SAN {redacted(engine.url)}, "
        f"DAGSTER_HOME {os.environ.get('DAGSTER_HOME') or 'unset'}, cached {cache_seconds:g} s)",
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
