"""How the reference worker hears about jobs: polling hears only PENDING jobs created from now
on; an unknown dispatcher is named."""

import pytest

from batch_pipeline.san.tables import CARD_ANALYSIS, COMPLETED
from san_sandbox.events import PollingEvents, open_job_events


def test_polling_hears_only_pending_jobs_created_after_it_started(sandbox):
    before = sandbox.job(CARD_ANALYSIS, 1)
    events = PollingEvents(sandbox.engine, poll_every_s=0.05)
    after = sandbox.job(CARD_ANALYSIS, 2)
    sandbox.job(CARD_ANALYSIS, 3, status=COMPLETED)
    heard = events.next_job_ids(timeout_s=1)
    assert heard == [after] and before not in heard
    assert events.next_job_ids(timeout_s=0.1) == []  # each job once


def test_an_unknown_dispatcher_is_named(sandbox):
    with pytest.raises(ValueError, match="unknown dispatcher 'kafka'"):
        open_job_events("kafka", sandbox.engine, redis_url="", consumer="worker")
