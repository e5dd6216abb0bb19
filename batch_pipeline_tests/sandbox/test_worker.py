"""The reference worker: what SAN's workers do, its faults, and the contract that keeps a slow
worker from doubling a result after recovery replaced its job."""

import json
from datetime import timedelta
from zoneinfo import ZoneInfo

from sqlalchemy import insert, select

from batch_pipeline.recovery.ghost_closing import recover_ghost_jobs
from batch_pipeline.recovery.ghost_jobs import GhostRule, detect_ghost_jobs
from batch_pipeline.san.database import utc_now
from batch_pipeline.san.dispatch import Dispatcher
from batch_pipeline.san.tables import (
    CARD_ANALYSIS,
    COMPLETED,
    FAILED,
    PENDING,
    PROCESSING,
    SCRAP_REFINE,
    TIL_GENERATION,
    jobs,
    knowledge_cards,
)
from batch_pipeline_tests.sandbox.conftest import ListedEvents
from san_sandbox.ai import EMBEDDING_DIMENSIONS
from san_sandbox.app import save_scraps
from san_sandbox.app_schema import app_daily_summaries, app_knowledge_cards, app_scraps
from san_sandbox.faults import Faults
from san_sandbox.time_travel import age_database
from san_sandbox.worker import ReferenceWorker


def worker(db, *batches, faults=Faults()):
    return ReferenceWorker(db.engine, ListedEvents(*batches), faults, timezone="Asia/Seoul")


def saved_scrap(db, **faults):
    before = {job.id for job in db.jobs()}
    save_scraps(db.engine, Dispatcher(), count=1, users=1, faults=Faults(**faults))
    [refine, card] = [job for job in db.jobs() if job.id not in before]
    return refine.target_id, refine.id, card.id


def card_rows(db, scrap_id):
    with db.engine.connect() as conn:
        return conn.execute(
            select(app_knowledge_cards).where(app_knowledge_cards.c.scrap_id == scrap_id)
        ).all()


def refined_content(db, scrap_id):
    with db.engine.connect() as conn:
        return conn.execute(
            select(app_scraps.c.refined_content).where(app_scraps.c.id == scrap_id)
        ).scalar_one()


def test_a_worker_refines_builds_the_card_and_completes_both_jobs(sandbox):
    scrap_id, refine_job, card_job = saved_scrap(sandbox)
    stats = worker(sandbox, [refine_job, card_job]).drain()

    assert (stats.claimed, stats.completed) == (2, 2)
    assert refined_content(sandbox, scrap_id).startswith("Notes on")
    [card] = card_rows(sandbox, scrap_id)
    embedding = card.embedding if isinstance(card.embedding, list) else json.loads(card.embedding)
    assert len(embedding) == EMBEDDING_DIMENSIONS and abs(sum(x * x for x in embedding) - 1) < 1e-3
    assert card.title and card.summary
    for job in sandbox.jobs():
        assert (
            job.status == COMPLETED and job.started_at is not None and job.finished_at is not None
        )


def test_til_generation_writes_the_summary_from_the_day_cards(sandbox):
    scrap_id, refine_job, card_job = saved_scrap(sandbox)
    worker(sandbox, [refine_job, card_job]).drain()
    [card] = card_rows(sandbox, scrap_id)
    today = utc_now().astimezone(ZoneInfo("Asia/Seoul")).date()
    with sandbox.engine.begin() as conn:
        summary_id = conn.execute(
            insert(app_daily_summaries)
            .values(user_id=card.user_id, target_date=today, created_at=utc_now())
            .returning(app_daily_summaries.c.id)
        ).scalar_one()
    til_job = sandbox.job(TIL_GENERATION, summary_id, PENDING)

    assert worker(sandbox, [til_job]).drain().completed == 1
    [summary] = sandbox.summaries()
    assert summary.content.startswith(
        f"TIL {today.isoformat()}: you learned 1 thing(s): {card.title}"
    )


def test_two_workers_hearing_the_same_job_run_it_once(sandbox):
    scrap_id, _, card_job = saved_scrap(sandbox)
    first, second = worker(sandbox, [card_job]), worker(sandbox, [card_job])
    assert first.drain().claimed == 1
    assert (second.drain().claimed, second.stats.not_claimed) == (0, 1)
    assert len(card_rows(sandbox, scrap_id)) == 1


def test_a_lost_event_leaves_the_job_pending(sandbox):
    _, refine_job, _ = saved_scrap(sandbox)
    stats = worker(sandbox, [refine_job], faults=Faults(event_lost=1.0)).drain()
    assert (stats.lost_events, stats.claimed) == (1, 0)
    assert sandbox.get_job(refine_job).status == PENDING


def test_a_worker_that_dies_mid_job_leaves_it_processing(sandbox):
    scrap_id, refine_job, _ = saved_scrap(sandbox)
    assert worker(sandbox, [refine_job], faults=Faults(worker_dies_mid_job=1.0)).drain().died == 1
    job = sandbox.get_job(refine_job)
    assert job.status == PROCESSING and job.started_at is not None and job.finished_at is None
    assert refined_content(sandbox, scrap_id) is None


def test_a_failed_ai_call_and_a_poison_scrap_end_the_job_failed(sandbox):
    scrap_id, refine_job, _ = saved_scrap(sandbox)
    assert worker(sandbox, [refine_job], faults=Faults(ai_fails=1.0)).drain().failed == 1
    assert (
        sandbox.get_job(refine_job).status == FAILED
        and "503" in sandbox.get_job(refine_job).error_message
    )

    poison_scrap, poison_refine, poison_card = saved_scrap(sandbox, poison=1.0)
    assert worker(sandbox, [poison_refine, poison_card]).drain().failed == 2
    assert all("poison" in sandbox.get_job(j).error_message for j in (poison_refine, poison_card))
    assert refined_content(sandbox, poison_scrap) is None and not card_rows(sandbox, poison_scrap)


def replace_ghosts(db):
    """Age the sandbox past the PROCESSING threshold and run ghost-job recovery."""
    age_database(db.engine, timedelta(hours=2))
    rule = GhostRule(now=utc_now())
    with db.engine.connect() as conn:
        ghosts = detect_ghost_jobs(conn, rule)
    return recover_ghost_jobs(db.engine, Dispatcher(), ghosts, rule)


def test_a_slow_worker_that_finishes_after_recovery_replaced_its_job_doubles_nothing(sandbox):
    """The contract: the late worker keeps its (identical) result but cannot complete the closed
    job; the replacement's worker finds the card in place and inserts no second one."""
    scrap_id, _, card_job = saved_scrap(sandbox)
    slow = worker(sandbox, [card_job], faults=Faults(slow_worker=1.0))
    assert slow.drain().held_slow == 1
    assert card_job in {r["failed_job_id"] for r in replace_ghosts(sandbox).recovered}
    [replacement] = sandbox.jobs(retry_of_job_id=card_job)

    late = slow.drain()  # the slow worker finishes first, after recovery closed its job
    assert (late.late_results, late.completed) == (1, 0)
    assert sandbox.get_job(card_job).status == FAILED  # a closed job is never completed
    assert len(card_rows(sandbox, scrap_id)) == 1

    fresh = worker(sandbox, [replacement.id]).drain()
    assert (fresh.completed, fresh.results_already_there) == (1, 1)
    assert sandbox.get_job(replacement.id).status == COMPLETED
    assert len(card_rows(sandbox, scrap_id)) == 1
    assert sandbox.count(knowledge_cards) == 1


def test_a_slow_worker_that_finishes_after_the_replacement_doubles_nothing(sandbox):
    scrap_id, refine_job, _ = saved_scrap(sandbox)
    slow = worker(sandbox, [refine_job], faults=Faults(slow_worker=1.0))
    slow.drain()
    replace_ghosts(sandbox)
    [replacement] = sandbox.jobs(retry_of_job_id=refine_job)
    assert worker(sandbox, [replacement.id]).drain().completed == 1
    written = refined_content(sandbox, scrap_id)

    late = slow.drain()
    assert (late.late_results, late.results_already_there) == (1, 1)
    assert sandbox.get_job(refine_job).status == FAILED
    assert refined_content(sandbox, scrap_id) == written


def test_a_job_whose_target_is_gone_fails_with_the_reason(sandbox):
    job_id = sandbox.job(CARD_ANALYSIS, 424242, PENDING)
    assert worker(sandbox, [job_id]).drain().failed == 1
    job = sandbox.get_job(job_id)
    assert job.status == FAILED and "scrap 424242 does not exist" in job.error_message


def test_an_untitled_card_still_makes_a_til(sandbox):
    # knowledge_cards.title is nullable in the app's DDL; the demo state once had such cards and
    # the TIL writer raised TypeError on them, killing `make run`'s living sandbox.
    scrap_id, refine_job, card_job = saved_scrap(sandbox)
    worker(sandbox, [refine_job, card_job]).drain()
    [card] = card_rows(sandbox, scrap_id)
    with sandbox.engine.begin() as conn:
        conn.execute(
            app_knowledge_cards.update()
            .where(app_knowledge_cards.c.id == card.id)
            .values(title=None)
        )
        today = utc_now().astimezone(ZoneInfo("Asia/Seoul")).date()
        summary_id = conn.execute(
            insert(app_daily_summaries)
            .values(user_id=card.user_id, target_date=today, created_at=utc_now())
            .returning(app_daily_summaries.c.id)
        ).scalar_one()
    til_job = sandbox.job(TIL_GENERATION, summary_id, PENDING)
    assert worker(sandbox, [til_job]).drain().completed == 1
    assert "(untitled card)" in sandbox.summaries()[0].content


def test_a_job_that_raises_unexpectedly_fails_and_the_worker_goes_on(sandbox, monkeypatch):
    from san_sandbox import ai

    first, second = saved_scrap(sandbox), saved_scrap(sandbox)
    calls = []

    def refine_once_broken(original):
        calls.append(original)
        if len(calls) == 1:
            raise TypeError("a bad row")
        return "refined"

    monkeypatch.setattr(ai, "refine", refine_once_broken)
    stats = worker(sandbox, [first[1], second[1]]).drain()
    assert (stats.failed, stats.completed) == (1, 1)
    failed = sandbox.get_job(first[1])
    assert failed.status == FAILED and "TypeError: a bad row" in failed.error_message
    assert sandbox.get_job(second[1]).status == COMPLETED


def test_first_attempts_only_faults_strike_the_app_s_first_job_and_spare_its_retry(sandbox):
    """time-to-heal's fault model: the app's announcement and first AI call fail, the fast
    lane's re-announcement and its retry (a new job) get through."""
    scrap_id, refine_job, _card_job = saved_scrap(sandbox)
    faults = Faults(event_lost=1.0, ai_fails=1.0, first_attempts_only=True, reannouncement_lost=0.0)
    with sandbox.engine.begin() as conn:
        retry = conn.execute(
            insert(jobs)
            .values(
                job_type=SCRAP_REFINE,
                target_id=scrap_id,
                status=PENDING,
                created_at=utc_now(),
                updated_at=utc_now(),
            )
            .returning(jobs.c.id)
        ).scalar_one()
    # the app's announcement (lost), the lane's re-announcement (heard; the AI fails), the retry
    stats = worker(sandbox, [refine_job], [refine_job], [retry], faults=faults).drain()
    assert (stats.lost_events, stats.failed, stats.completed) == (1, 1, 1)
    assert (
        sandbox.get_job(refine_job).status == FAILED and sandbox.get_job(retry).status == COMPLETED
    )
    assert refined_content(sandbox, scrap_id) is not None
