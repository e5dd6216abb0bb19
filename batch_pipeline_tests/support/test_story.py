"""A target's story from SAN's database, on both dialects: its facts, its jobs, and verdicts that
say what the recoveries then do (checked by running them)."""

from datetime import timedelta

import pytest
from sqlalchemy import select

from batch_pipeline.fast_lane.retries import RETRY_AFTER, RETRY_JITTER
from batch_pipeline.recovery.orphan_scraps import ORPHAN_SCRAPS
from batch_pipeline.san.database import database_now, read_transaction
from batch_pipeline.san.tables import (
    CARD_ANALYSIS,
    COMPLETED,
    FAILED,
    PENDING,
    PROCESSING,
    SCRAP_REFINE,
    TIL_GENERATION,
    daily_summaries,
    jobs,
    knowledge_cards,
    scraps,
)
from batch_pipeline.support.story import (
    EXHAUSTED,
    HEALTHY,
    IN_GRACE,
    NEEDS_WORK,
    WAITING,
    NotFound,
    read_story,
)
from batch_pipeline_tests.runs import latest_metadata, run_recovery
from batch_pipeline_tests.support.conftest import exhausted_scrap, failed_jobs


def story(db, kind, target_id):
    with read_transaction(db.engine) as conn:
        return read_story(conn, kind, target_id, database_now(conn))


def card_verdict(db, scrap):
    [verdict] = [v for v in story(db, "scrap", scrap).verdicts if v.job_type == CARD_ANALYSIS]
    return verdict


def test_the_facts_and_every_job_oldest_first(san_db):
    user = san_db.user()
    scrap = san_db.scrap(user, created_at=san_db.ago(days=2), refined=True)
    first, second = failed_jobs(san_db, scrap, 2)
    refine = san_db.job(SCRAP_REFINE, scrap, COMPLETED, created_at=san_db.ago(days=2))
    told = story(san_db, "scrap", scrap)
    assert (told.kind, told.id, told.user_id) == ("scrap", scrap, user)
    assert told.facts == {"refined": True, "knowledge_card": None}
    assert [job.id for job in told.jobs] == sorted([first, second, refine])
    retry = next(job for job in told.jobs if job.id == second)
    assert (retry.retry_of_job_id, retry.error_message) == (first, "AI 500: model overloaded")
    assert {v.job_type: v.state for v in told.verdicts}[SCRAP_REFINE] == HEALTHY


def test_a_healthy_scrap_with_its_card(san_db):
    scrap = san_db.scrap(san_db.user(), card=True)
    assert card_verdict(san_db, scrap).state == HEALTHY
    assert story(san_db, "scrap", scrap).facts["knowledge_card"] is not None


def test_an_unclaimed_pending_job_is_waited_on_until_the_ghost_rule(san_db):
    scrap = san_db.scrap(san_db.user())
    job = san_db.job(CARD_ANALYSIS, scrap, PENDING, created_at=san_db.ago(minutes=2))
    verdict = card_verdict(san_db, scrap)
    assert (verdict.state, verdict.job_id) == (WAITING, job)
    assert "announces it again" in verdict.says
    assert abs(verdict.next_at - (san_db.ago(minutes=2) + timedelta(minutes=30))) < timedelta(
        seconds=1
    )


def test_a_stale_job_is_a_ghost_the_next_run_closes_and_it_does(san_db):
    scrap = san_db.scrap(san_db.user())
    ghost = san_db.job(CARD_ANALYSIS, scrap, PENDING, created_at=san_db.ago(minutes=45))
    verdict = card_verdict(san_db, scrap)
    assert verdict.state == WAITING and "is a ghost" in verdict.says
    assert "enqueues a replacement" in verdict.says
    run_recovery(san_db)
    assert san_db.get_job(ghost).status == FAILED
    assert len(san_db.jobs(status=PENDING)) == 1


def test_a_processing_job_is_closed_only_after_the_processing_threshold(san_db):
    scrap = san_db.scrap(san_db.user())
    started = san_db.ago(minutes=20)
    san_db.job(CARD_ANALYSIS, scrap, PROCESSING, created_at=started, started_at=started)
    verdict = card_verdict(san_db, scrap)
    assert verdict.state == WAITING and "PROCESSING for 20 min" in verdict.says
    assert abs(verdict.next_at - (started + timedelta(hours=1))) < timedelta(seconds=1)


def test_a_job_stamped_as_started_before_it_was_created_closes_once_old_enough(san_db):
    """A worker's clock behind the database's: the rule waits for the job to have existed for
    the shorter threshold, and the verdict says when that is."""
    scrap = san_db.scrap(san_db.user())
    created = san_db.ago(minutes=5)
    san_db.job(CARD_ANALYSIS, scrap, PROCESSING, created_at=created, started_at=san_db.ago(hours=2))
    verdict = card_verdict(san_db, scrap)
    assert verdict.state == WAITING and "no job is a ghost before it has existed for 30" in (
        verdict.says
    )
    assert abs(verdict.next_at - (created + timedelta(minutes=30))) < timedelta(seconds=1)


def test_a_status_the_pipeline_does_not_know_counts_as_active(san_db):
    scrap = san_db.scrap(san_db.user())
    san_db.job(CARD_ANALYSIS, scrap, "pending")
    verdict = card_verdict(san_db, scrap)
    assert verdict.state == WAITING and "does not know" in verdict.says


def test_inside_the_grace_nothing_heals_it_yet(san_db):
    scrap = san_db.scrap(san_db.user(), created_at=san_db.ago(minutes=3))
    verdict = card_verdict(san_db, scrap)
    assert verdict.state == IN_GRACE
    assert abs(verdict.next_at - (san_db.ago(minutes=3) + timedelta(minutes=10))) < timedelta(
        seconds=1
    )
    run_recovery(san_db)
    assert san_db.jobs() == []


def test_a_target_that_needs_work_is_enqueued_by_the_next_run_as_its_verdict_says(san_db):
    scrap = san_db.scrap(san_db.user(), created_at=san_db.ago(hours=3))
    verdict = card_verdict(san_db, scrap)
    assert verdict.state == NEEDS_WORK and "never enqueued" in verdict.says
    result, instance = run_recovery(san_db)
    assert result.success
    assert latest_metadata(instance, ORPHAN_SCRAPS.area)["recovered"][0]["scrap_id"] == scrap


def test_a_failed_target_is_due_for_the_fast_lane_after_its_backoff(san_db):
    scrap = san_db.scrap(san_db.user(), created_at=san_db.ago(hours=1))
    [failed] = failed_jobs(san_db, scrap, 1, last_failed_ago=timedelta(seconds=1))
    verdict = card_verdict(san_db, scrap)
    assert verdict.state == NEEDS_WORK and "fast lane enqueues it" in verdict.says
    ended = san_db.get_job(failed).updated_at
    wait = verdict.next_at - ended.replace(tzinfo=verdict.next_at.tzinfo)
    assert RETRY_AFTER <= wait <= RETRY_AFTER * (1 + RETRY_JITTER)


def test_an_exhausted_target_names_its_last_error_and_the_redrive_and_gets_no_job(san_db):
    scrap, _ = exhausted_scrap(san_db, error="ReadTimeout: the AI took longer than 30 s")
    verdict = card_verdict(san_db, scrap)
    assert verdict.state == EXHAUSTED
    assert "10 of max_attempts 10" in verdict.says and "ReadTimeout" in verdict.says
    assert f"redrive --area orphan_scrap_recovery --ids {scrap}" in verdict.says
    result, instance = run_recovery(san_db)
    assert latest_metadata(instance, ORPHAN_SCRAPS.area)["exhausted_ids"] == [scrap]
    assert san_db.jobs(status=PENDING) == []


def test_a_summary_story_says_whether_its_content_is_set(san_db):
    user = san_db.user()
    empty = san_db.summary(user, created_at=san_db.ago(hours=3))
    written = san_db.summary(user, created_at=san_db.ago(hours=3), content="TIL")
    san_db.job(TIL_GENERATION, empty, FAILED, created_at=san_db.ago(hours=3))
    told = story(san_db, "summary", empty)
    assert told.facts["content_set"] is False
    assert [v.state for v in told.verdicts] == [NEEDS_WORK]
    assert [job.job_type for job in told.jobs] == [TIL_GENERATION]
    assert story(san_db, "summary", written).verdicts[0].state == HEALTHY


def test_a_job_tells_its_targets_story(san_db):
    scrap, failed = exhausted_scrap(san_db)
    told = story(san_db, "job", failed[3])
    assert (told.kind, told.id, told.asked_about_job) == ("scrap", scrap, failed[3])


@pytest.mark.parametrize(
    ("kind", "message"),
    [("scrap", "no scrap 424242 in SAN's scraps table"), ("summary", "no summary 424242")],
)
def test_an_unknown_id_is_one_clear_error(san_db, kind, message):
    with pytest.raises(NotFound, match=message):
        story(san_db, kind, 424242)


def test_an_unknown_kind_and_an_unknown_job_are_clear_errors(san_db):
    with pytest.raises(NotFound, match="unknown kind 'card'"):
        story(san_db, "card", 1)
    with pytest.raises(NotFound, match="no job 77"):
        story(san_db, "job", 77)


def test_reading_a_story_writes_nothing(san_db):
    scrap, _ = exhausted_scrap(san_db)
    stale = san_db.scrap(san_db.user(), created_at=san_db.ago(hours=3))
    san_db.job(CARD_ANALYSIS, stale, PENDING, created_at=san_db.ago(hours=2))

    def everything():
        with san_db.engine.connect() as conn:
            return [
                conn.execute(select(table).order_by(table.c.id)).all()
                for table in (scraps, jobs, knowledge_cards, daily_summaries)
            ]

    before = everything()
    for target in (scrap, stale):
        story(san_db, "scrap", target)
    assert everything() == before
