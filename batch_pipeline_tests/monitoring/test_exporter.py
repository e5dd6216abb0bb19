"""The metrics endpoint over HTTP, as Prometheus scrapes it: SAN's backlog, the heals and the
healer's liveness from Dagster's instance; a broken or silent source is its `_up 0`, never an
error page nor a hung scrape; ten scrapes cost one reading; idle or many clients are served."""

import logging
import socket
import subprocess
import threading
import time
import urllib.request
from datetime import timedelta

import pytest
from dagster import instance_for_test
from dagster._core.scheduler.instigation import TickStatus
from dagster._daemon.types import DaemonHeartbeat
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import make_url

from batch_pipeline.fast_lane.sensors import SENSOR_NAME
from batch_pipeline.fast_lane.tick import LaneState
from batch_pipeline.monitoring import server
from batch_pipeline.monitoring.exporter import EXPORTED_METRICS, HealingCollector
from batch_pipeline.monitoring.server import registry_for, start_server
from batch_pipeline.san.database import create_san_engine
from batch_pipeline.san.tables import CARD_ANALYSIS, PENDING
from batch_pipeline.support.heal_totals import update_heal_totals
from batch_pipeline_tests.network import StallingProxy
from batch_pipeline_tests.processes import free_port
from batch_pipeline_tests.runs import record_sensor_tick, run_recovery

GHOSTS = 37


class Endpoint:
    """A collector served on a free port, scraped over HTTP."""

    def __init__(self, collector: HealingCollector):
        self.collector = collector
        self.port = free_port()
        self.server, self.thread = start_server(registry_for(collector), "127.0.0.1", self.port)

    def scrape(self) -> dict:
        # 10 s: Prometheus' scrape timeout; a scrape that has not answered by then is lost
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as page:
            assert page.status == 200
            text = page.read().decode()
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }

    def close(self):
        self.server.shutdown()


@pytest.fixture
def endpoint():
    opened = []

    def open_endpoint(engine, instance, cache_seconds=0.0):
        opened.append(
            Endpoint(HealingCollector(engine, lambda: instance, "Asia/Seoul", cache_seconds))
        )
        return opened[-1]

    yield open_endpoint
    for served in opened:
        served.close()


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))))


def test_37_ghosts_show_then_heal_and_the_heals_are_counted(san_db, endpoint):
    for target in range(GHOSTS):
        san_db.job(CARD_ANALYSIS, target, PENDING, created_at=san_db.ago(minutes=45))
    with instance_for_test() as instance:
        served = endpoint(san_db.engine, instance)
        before = served.scrape()
        assert value(before, "batch_pipeline_san_up") == 1
        assert value(before, "batch_pipeline_dagster_up") == 1
        assert value(before, "san_jobs_stale", job_type=CARD_ANALYSIS, status=PENDING) == GHOSTS
        age = value(
            before, "san_jobs_oldest_active_age_seconds", job_type=CARD_ANALYSIS, status=PENDING
        )
        assert 45 * 60 <= age < 47 * 60
        assert value(before, "batch_pipeline_healed_total", area="ghost_job_recovery") == 0

        result, _ = run_recovery(san_db, instance)
        assert result.success
        update_heal_totals(instance)  # what audit_index_sensor's tick does
        after = served.scrape()
        assert value(after, "san_jobs_stale", job_type=CARD_ANALYSIS, status=PENDING) == 0
        # the replacements are fresh PENDING jobs: active, not stale
        assert value(after, "san_jobs_active", job_type=CARD_ANALYSIS, status=PENDING) == GHOSTS
        assert value(after, "batch_pipeline_healed_total", area="ghost_job_recovery") == GHOSTS
        heal = "batch_pipeline_time_to_heal_seconds"
        assert value(after, f"{heal}_count", lane="recovery_job") == GHOSTS
        # they had waited 45 minutes: all under the 1 h bound, none under 30 min
        assert value(after, f"{heal}_bucket", lane="recovery_job", le="3600") == GHOSTS
        assert value(after, f"{heal}_bucket", lane="recovery_job", le="1800") == 0
        assert value(after, "batch_pipeline_exhausted_targets", area="ghost_job_recovery") == 0
        # how the throttle paced the writes: some writing, and the rest it took (none is fine)
        paced = "batch_pipeline_throttle_seconds"
        assert value(after, paced, area="ghost_job_recovery", doing="write") > 0
        assert value(after, paced, area="ghost_job_recovery", doing="rest") >= 0
        ended = value(
            after, "batch_pipeline_last_success_timestamp_seconds", dagster_job="recovery_job"
        )
        assert time.time() - 120 < ended <= time.time()
        assert {name for name, _ in after} <= set(EXPORTED_METRICS) | PROCESS_METRICS


PROCESS_METRICS = {
    "process_virtual_memory_bytes",
    "process_resident_memory_bytes",
    "process_start_time_seconds",
    "process_cpu_seconds_total",
    "process_open_fds",
    "process_max_fds",
}


def test_the_healer_s_liveness_is_read_from_the_instance(san_db, endpoint):
    now = time.time()
    with instance_for_test() as instance:
        cursor = LaneState(
            threshold=timedelta(seconds=42), claim_p99=timedelta(seconds=3.5), claims=100
        ).to_json()
        record_sensor_tick(instance, SENSOR_NAME, TickStatus.SUCCESS, now - 30, cursor=cursor)
        record_sensor_tick(
            instance, SENSOR_NAME, TickStatus.FAILURE, now - 5, error="cannot probe", cursor=cursor
        )
        instance.add_daemon_heartbeat(
            DaemonHeartbeat(timestamp=now - 12, daemon_type="SENSOR", daemon_id="d", errors=[])
        )
        samples = endpoint(san_db.engine, instance).scrape()
    tick = "batch_pipeline_sensor_last_tick_timestamp_seconds"
    assert value(samples, tick, sensor=SENSOR_NAME, status="success") == pytest.approx(now - 30)
    assert value(samples, tick, sensor=SENSOR_NAME, status="failure") == pytest.approx(now - 5)
    assert value(samples, tick, sensor=SENSOR_NAME, status="skipped") is None  # never skipped
    assert value(samples, "batch_pipeline_sensor_running", sensor=SENSOR_NAME) == 1
    assert value(samples, "batch_pipeline_fast_lane_failing") == 1
    assert value(samples, "batch_pipeline_fast_lane_off") == 0
    assert value(samples, "batch_pipeline_fast_lane_reannounce_threshold_seconds") == 42
    assert value(samples, "batch_pipeline_fast_lane_claim_latency_p99_seconds") == 3.5
    heartbeat = value(samples, "batch_pipeline_daemon_heartbeat_timestamp_seconds", daemon="SENSOR")
    assert heartbeat == pytest.approx(now - 12)
    assert value(samples, "batch_pipeline_recovery_period_seconds") == 7200


def test_a_broken_database_is_san_up_0_on_every_scrape_and_logged_once(endpoint, caplog):
    engine = create_san_engine("postgresql+psycopg://postgres@127.0.0.1:1/san")
    with instance_for_test() as instance, caplog.at_level(logging.WARNING):
        served = endpoint(engine, instance)
        for _ in range(3):
            samples = served.scrape()  # 200 each time: Prometheus sees the failure, not a 500
            assert value(samples, "batch_pipeline_san_up") == 0
            assert value(samples, "batch_pipeline_dagster_up") == 1
            assert not [name for name, _ in samples if name.startswith("san_jobs")]
    warnings = [r.getMessage() for r in caplog.records if "cannot read" in r.getMessage()]
    assert len(warnings) == 1 and "the SAN database" in warnings[0]
    assert "127.0.0.1" in warnings[0] or "connection" in warnings[0].lower()


def test_ten_scrapes_within_the_cache_cost_one_reading(san_db, endpoint):
    with instance_for_test() as instance:
        served = endpoint(san_db.engine, instance, cache_seconds=60)
        readings = []
        real = served.collector.san.read
        served.collector.san.read = lambda: readings.append(1) or real()
        for _ in range(10):
            assert value(served.scrape(), "batch_pipeline_san_up") == 1
        assert len(readings) == 1


def reading_threads() -> int:
    return sum(thread.name == "metrics-read" for thread in threading.enumerate())


def test_a_database_that_stops_answering_is_san_up_0_and_the_scrape_still_answers(
    pg_db, endpoint, caplog
):
    """Behind a proxy that stops forwarding, no server timeout fires: each scrape still answers
    (within the 10 s of `scrape`), with `_up 0`, and waits on the one reading in flight instead
    of starting another. Forwarding again, the reading ends and SAN is up again."""
    with StallingProxy("127.0.0.1", make_url(pg_db.url).port or 5432) as proxy:
        engine = create_san_engine(make_url(pg_db.url).set(port=proxy.port).render_as_string(False))
        with instance_for_test() as instance, caplog.at_level(logging.WARNING):
            served = endpoint(engine, instance)
            assert value(served.scrape(), "batch_pipeline_san_up") == 1
            proxy.stall()
            for _ in range(3):
                samples = served.scrape()
                assert value(samples, "batch_pipeline_san_up") == 0
                assert value(samples, "batch_pipeline_dagster_up") == 1
            assert reading_threads() == 1
            proxy.resume()
            deadline = time.monotonic() + 30
            while value(served.scrape(), "batch_pipeline_san_up") != 1:
                assert time.monotonic() < deadline, "SAN never readable again after the stall"
                time.sleep(0.5)
        engine.dispose()
    warnings = [r.getMessage() for r in caplog.records if "cannot read" in r.getMessage()]
    assert warnings == ["metrics: cannot read the SAN database: no answer within 5 s"]


def test_dagster_storage_that_stops_answering_is_dagster_up_0(san_db, endpoint):
    released = threading.Event()

    def silent_instance():
        released.wait(60)
        raise RuntimeError("storage gone")

    served = endpoint(san_db.engine, None)
    served.collector.dagster.read = silent_instance
    try:
        samples = served.scrape()
        assert value(samples, "batch_pipeline_dagster_up") == 0
        assert value(samples, "batch_pipeline_san_up") == 1
    finally:
        released.set()


def test_a_path_other_than_metrics_is_404(san_db, endpoint):
    served = endpoint(san_db.engine, None)
    for path in ("/", "/metric", "/favicon.ico"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{served.port}{path}", timeout=10)
        assert refused.value.code == 404
        assert b"/metrics" in refused.value.read()


def test_an_idle_connection_is_closed_and_its_thread_ends(san_db, endpoint, monkeypatch):
    monkeypatch.setattr(server.IdleClosingHandler, "timeout", 0.5)
    served = endpoint(san_db.engine, None)
    before = threading.active_count()
    idle = [socket.create_connection(("127.0.0.1", served.port)) for _ in range(50)]
    try:
        for sock in idle:
            sock.settimeout(10)
            assert sock.recv(1) == b""  # the server closed it: it sent nothing in time
    finally:
        for sock in idle:
            sock.close()
    deadline = time.monotonic() + 10
    while threading.active_count() > before:
        assert time.monotonic() < deadline, "the idle connections' threads did not end"
        time.sleep(0.1)
    assert value(served.scrape(), "batch_pipeline_san_up") == 1


def listen_backlog(port: int) -> int:
    """The kernel's queue for the port's listening socket (`ss`'s Send-Q of a LISTEN socket)."""
    listing = subprocess.run(
        ["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True, check=True
    ).stdout.split()
    return int(listing[2])


def test_200_simultaneous_scrapes_are_all_answered(san_db, endpoint):
    """Connections that arrive while the accepting thread is busy wait in the kernel's queue: the
    standard library's 5 dropped the rest of a burst of scrapes."""
    served = endpoint(san_db.engine, None, cache_seconds=60)
    assert listen_backlog(served.port) >= 200
    statuses: list[int] = []

    def scrape():
        url = f"http://127.0.0.1:{served.port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as page:
            statuses.append(page.status)

    scrapers = [threading.Thread(target=scrape) for _ in range(200)]
    for scraper in scrapers:
        scraper.start()
    for scraper in scrapers:
        scraper.join(30)
    assert statuses == [200] * 200


def test_a_lane_that_does_not_re_announce_exports_no_threshold(san_db, endpoint):
    with instance_for_test() as instance:
        cursor = LaneState(threshold=timedelta(seconds=10), reannouncing=False).to_json()
        record_sensor_tick(instance, SENSOR_NAME, TickStatus.SKIPPED, time.time(), cursor=cursor)
        samples = endpoint(san_db.engine, instance).scrape()
    assert value(samples, "batch_pipeline_fast_lane_reannounce_threshold_seconds") is None
