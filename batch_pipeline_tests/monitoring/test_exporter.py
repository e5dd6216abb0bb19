"""The metrics endpoint over HTTP, as Prometheus scrapes it: SAN's backlog, the heals and the
healer's liveness from Dagster's instance; a broken database is `batch_pipeline_san_up 0`,
never an error page; ten scrapes cost one reading."""

import logging
import time
import urllib.request
from datetime import timedelta

import pytest
from dagster import instance_for_test
from dagster._core.scheduler.instigation import TickStatus
from dagster._daemon.types import DaemonHeartbeat
from prometheus_client import start_http_server
from prometheus_client.parser import text_string_to_metric_families

from batch_pipeline.fast_lane.sensors import SENSOR_NAME
from batch_pipeline.fast_lane.tick import LaneState
from batch_pipeline.monitoring.exporter import EXPORTED_METRICS, HealingCollector
from batch_pipeline.monitoring.server import registry_for
from batch_pipeline.san.database import create_san_engine
from batch_pipeline.san.tables import CARD_ANALYSIS, PENDING
from batch_pipeline.support.heal_totals import update_heal_totals
from batch_pipeline_tests.processes import free_port
from batch_pipeline_tests.runs import record_sensor_tick, run_recovery

GHOSTS = 37


class Endpoint:
    """A collector served on a free port, scraped over HTTP."""

    def __init__(self, collector: HealingCollector):
        self.collector = collector
        self.port = free_port()
        self.server, self.thread = start_http_server(
            self.port, addr="127.0.0.1", registry=registry_for(collector)
        )

    def scrape(self) -> dict:
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
