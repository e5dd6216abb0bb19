"""The reference SAN worker: what SAN's workers do, and the contract that makes recovery safe.

The contract (README, "For SAN's worker authors"):

1. Claim a job only while it is PENDING:
   `UPDATE jobs SET status='PROCESSING', started_at=now() WHERE id=:id AND status='PENDING'`.
   No row updated: another worker has it, or recovery closed it. Drop it.
2. Call the AI outside any transaction.
3. In one transaction, write the result idempotently and complete the job only if it is still
   the live attempt:
   - refined text: `UPDATE scraps SET refined_content=… WHERE id=… AND refined_content IS NULL`
   - card: `INSERT … ON CONFLICT (scrap_id) DO NOTHING` (`knowledge_cards.scrap_id` is unique)
   - TIL: `UPDATE daily_summaries SET content=… WHERE id=… AND content IS NULL`
   - `UPDATE jobs SET status='COMPLETED' … WHERE id=:id AND status='PROCESSING'`
   A worker that finishes after recovery replaced its job (it is FAILED now) keeps its result,
   which is just as good, but cannot complete a closed job, and the replacement job's worker
   cannot add a second card. Nothing is doubled, whichever finishes first.
"""

import heapq
import logging
import time
from collections import deque
from dataclasses import asdict, dataclass, field, fields
from datetime import date

from sqlalchemy import and_, exists, select, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection, Engine

from batch_pipeline.san.database import utc_now
from batch_pipeline.san.tables import (
    CARD_ANALYSIS,
    COMPLETED,
    FAILED,
    PENDING,
    PROCESSING,
    SCRAP_REFINE,
    TIL_GENERATION,
    jobs,
)
from batch_pipeline.san.timezone import san_timezone_name
from batch_pipeline.til.auto_generation import day_bounds
from san_sandbox import ai
from san_sandbox.app_schema import (
    app_daily_summaries,
    app_knowledge_cards,
    app_scraps,
    require_sandbox,
)
from san_sandbox.events import JobEvents
from san_sandbox.faults import Faults


@dataclass
class WorkerStats:
    heard: int = 0  # job ids announced to (or polled by) this worker
    lost_events: int = 0  # announcements that never arrived (fault)
    not_claimed: int = 0  # another worker had it, or it was no longer PENDING
    claimed: int = 0
    completed: int = 0
    failed: int = 0  # the AI call failed (fault or poison), job ended FAILED
    died: int = 0  # the worker died mid-job (fault): the job stays PROCESSING
    held_slow: int = 0  # claimed, finished only later (fault)
    late_results: int = 0  # finished after recovery closed the job: result kept, job not completed
    results_already_there: int = (
        0  # the idempotent write found the result in place: nothing doubled
    )
    # pg_notify reaches every listener: dedup by id
    lost_job_ids: list = field(default_factory=list)

    def add(self, other: "WorkerStats") -> "WorkerStats":
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        self.lost_events = len(set(self.lost_job_ids))
        return self

    @property
    def did_nothing(self) -> bool:
        return not (self.claimed or self.completed or self.failed or self.late_results)

    def as_dict(self) -> dict:
        return asdict(self)


def claim_job(conn: Connection, job_id: int, now) -> tuple[str, int] | None:
    """Contract step 1: PENDING -> PROCESSING, or None if the job is not ours to run."""
    row = conn.execute(
        update(jobs)
        .where(jobs.c.id == job_id, jobs.c.status == PENDING)
        .values(status=PROCESSING, started_at=now, updated_at=now)
        .returning(jobs.c.job_type, jobs.c.target_id)
    ).first()
    return (row.job_type, row.target_id) if row else None


def finish_job(conn: Connection, job_id: int, status: str, now, error: str | None = None) -> bool:
    """Contract step 3: end the job only if it is still the live attempt (PROCESSING)."""
    result = conn.execute(
        update(jobs)
        .where(jobs.c.id == job_id, jobs.c.status == PROCESSING)
        .values(status=status, finished_at=now, updated_at=now, error_message=error)
    )
    return result.rowcount == 1


# Each dialect's INSERT with ON CONFLICT (the app's own SQL, which the sandbox plays).
INSERT_OR_IGNORE = {"postgresql": postgresql_insert, "sqlite": sqlite_insert}


def insert_or_ignore(conn: Connection, table, values: dict, unique_column: str) -> bool:
    """INSERT … ON CONFLICT DO NOTHING; True if the row was inserted."""
    insert = INSERT_OR_IGNORE[conn.dialect.name]
    statement = (
        insert(table).values(**values).on_conflict_do_nothing(index_elements=[unique_column])
    )
    return conn.execute(statement).rowcount == 1


log = logging.getLogger(__name__)


class TargetMissing(RuntimeError):
    """The job's target row does not exist."""


class ReferenceWorker:
    """One SAN worker. `drain()` handles every announced job until the channel is quiet."""

    def __init__(
        self,
        engine: Engine,
        events: JobEvents,
        faults: Faults = Faults(),
        timezone: str | None = None,
    ):
        require_sandbox(engine)  # it claims and completes jobs: never a real SAN's
        self.engine, self.events, self.faults = engine, events, faults
        self.timezone = timezone or san_timezone_name()
        self.stats = WorkerStats()
        self.deliveries: dict[int, int] = {}  # job id -> announcements heard
        self._first_jobs: dict[int, bool] = {}  # job id -> is its target's first job of its type
        self.slow_delay_s = (
            0.0  # drain() finishes slow jobs at its next call; run_for() sets a delay
        )
        # (due, job_id, job_type, target_id)
        self._slow: deque[tuple[float, int, str, int]] = deque()
        # busy workers (Faults.claim_delay): announcements heard, claimed later; (due, job_id)
        self._claims: list[tuple[float, int]] = []
        self._claim_pending: set[int] = set()
        self.first_lost: set[int] = set()  # jobs whose first announcement was lost

    # -- the loop -------------------------------------------------------------------------
    def drain(self, idle_s: float = 0.3, reset: bool = True) -> WorkerStats:
        """Finish jobs held by slow workers (recovery has had its chance), then handle every
        announced job until nothing is heard for idle_s. Returns this drain's stats."""
        if reset:
            self.stats = WorkerStats()
        require_sandbox(self.engine)  # real users may have arrived since it started
        self.finish_slow_jobs(due_before=float("inf"))
        while job_ids := self.events.next_job_ids(idle_s):
            for job_id in job_ids:
                self.handle(job_id)
        self.claim_due(due_before=float("inf"))
        return self.stats

    def take_backlog(self, newest_first: bool = False) -> int:
        """Handle the PENDING jobs that exist now, oldest first: a worker catching up after an
        outage polls for them, no announcement needed (so no event can be lost)."""
        order = jobs.c.id.desc() if newest_first else jobs.c.id
        with self.engine.connect() as conn:
            backlog = (
                conn.execute(select(jobs.c.id).where(jobs.c.status == PENDING).order_by(order))
                .scalars()
                .all()
            )
        for job_id in backlog:
            self.handle(job_id, announced=False)
        return len(backlog)

    def run_for(self, seconds: float, slow_delay_s: float, poll_s: float = 0.5) -> None:
        """Live mode: handle jobs as they come; a slow job finishes slow_delay_s after its claim."""
        self.slow_delay_s = slow_delay_s
        require_sandbox(self.engine)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            wait = min(
                poll_s,
                max(0.01, (self._claims[0][0] - time.monotonic()) if self._claims else poll_s),
            )
            for job_id in self.events.next_job_ids(wait):
                self.handle(job_id)
            self.claim_due(due_before=time.monotonic())
            self.finish_slow_jobs(due_before=time.monotonic())

    def claim_due(self, due_before: float) -> None:
        """Claim the announcements a busy worker heard whose delay has passed."""
        while self._claims and self._claims[0][0] <= due_before:
            _due, job_id = heapq.heappop(self._claims)
            self._claim_pending.discard(job_id)
            self.claim_and_run(job_id)

    def finish_slow_jobs(self, due_before: float) -> None:
        while self._slow and self._slow[0][0] <= due_before:
            _due, job_id, job_type, target_id = self._slow.popleft()
            self.run_job(job_id, job_type, target_id)

    # -- one job ----------------------------------------------------------------------------
    def handle(self, job_id: int, announced: bool = True) -> None:
        self.stats.heard += 1
        # Each announcement of a job is drawn on its own (a re-announcement is the fast lane's).
        if announced:
            self.deliveries[job_id] = self.deliveries.get(job_id, 0) + 1
        delivery = self.deliveries.get(job_id, 0)
        if (
            announced
            and self.faults.announcement_lost(job_id, delivery)
            and (delivery > 1 or self.strikes(job_id))
        ):
            self.stats.lost_events += 1
            self.stats.lost_job_ids.append(job_id)
            if delivery == 1:
                self.first_lost.add(job_id)
            return
        delay = self.faults.claim_delay(job_id, delivery) if announced else 0.0
        if delay > 0:  # a busy worker: heard now, claimed later (once, however often it hears it)
            if job_id not in self._claim_pending:
                self._claim_pending.add(job_id)
                heapq.heappush(self._claims, (time.monotonic() + delay, job_id))
            return
        self.claim_and_run(job_id)

    def claim_and_run(self, job_id: int) -> None:
        with self.engine.begin() as conn:
            claimed = claim_job(conn, job_id, utc_now())
        if claimed is None:
            self.stats.not_claimed += 1
            return
        self.stats.claimed += 1
        job_type, target_id = claimed
        if self.faults.happens("worker_dies_mid_job", job_id):
            self.stats.died += 1  # gone without a word: the job stays PROCESSING
            return
        if self.faults.happens("slow_worker", job_id):
            self.stats.held_slow += 1
            self._slow.append((time.monotonic() + self.slow_delay_s, job_id, job_type, target_id))
            return
        self.run_job(job_id, job_type, target_id)

    def strikes(self, job_id: int) -> bool:
        """Whether a fault drawn for this job may strike it: any job, or (first_attempts_only)
        only its target's first job of its type, the app's own first attempt."""
        if not self.faults.first_attempts_only:
            return True
        if job_id not in self._first_jobs:
            earlier = jobs.alias("earlier")
            query = select(
                ~exists().where(
                    earlier.c.job_type == jobs.c.job_type,
                    earlier.c.target_id == jobs.c.target_id,
                    earlier.c.id < jobs.c.id,
                )
            ).where(jobs.c.id == job_id)
            with self.engine.connect() as conn:
                self._first_jobs[job_id] = bool(conn.execute(query).scalar())
        return self._first_jobs[job_id]

    def run_job(self, job_id: int, job_type: str, target_id: int) -> None:
        try:
            with self.engine.connect() as conn:
                work = self.read_input(conn, job_type, target_id)
            if self.faults.happens("ai_fails", job_id) and self.strikes(job_id):
                raise ai.AiCallFailed("the AI server returned 503 (sandbox fault)")
            if self.faults.ai_down(time.time()):
                raise ai.AiCallFailed("the AI server is down (sandbox fault: an outage)")
            result = work()  # the AI call, outside any transaction
        except (ai.AiCallFailed, TargetMissing) as error:
            self.fail(job_id, str(error))
            return
        except Exception as error:  # a bad row (or a bug) fails this job; the worker goes on
            log.exception("job %s (%s %s) failed unexpectedly", job_id, job_type, target_id)
            self.fail(job_id, f"{type(error).__name__}: {error}")
            return
        with self.engine.begin() as conn:
            written = self.write_result(conn, job_type, target_id, result)
            live = finish_job(conn, job_id, COMPLETED, utc_now())
        if not written:
            self.stats.results_already_there += 1
        if live:
            self.stats.completed += 1
        else:
            self.stats.late_results += 1

    def fail(self, job_id: int, error: str) -> None:
        with self.engine.begin() as conn:
            finish_job(conn, job_id, FAILED, utc_now(), error=error[:500])
        self.stats.failed += 1

    def read_input(self, conn: Connection, job_type: str, target_id: int):
        """Read what the AI needs; return the AI call to make (a closure)."""
        if job_type in (SCRAP_REFINE, CARD_ANALYSIS):
            scrap = conn.execute(
                select(
                    app_scraps.c.user_id,
                    app_scraps.c.original_content,
                    app_scraps.c.refined_content,
                ).where(app_scraps.c.id == target_id)
            ).first()
            if scrap is None:
                raise TargetMissing(f"scrap {target_id} does not exist")
            if job_type == SCRAP_REFINE:
                return lambda: ai.refine(scrap.original_content)
            text = scrap.refined_content or scrap.original_content
            return lambda: (scrap.user_id, ai.analyse(text))
        if job_type == TIL_GENERATION:
            summary = conn.execute(
                select(app_daily_summaries.c.user_id, app_daily_summaries.c.target_date).where(
                    app_daily_summaries.c.id == target_id
                )
            ).first()
            if summary is None:
                raise TargetMissing(f"daily summary {target_id} does not exist")
            titles = self.card_titles_of_day(conn, summary.user_id, summary.target_date)
            return lambda: ai.write_til(summary.target_date.isoformat(), titles)
        raise TargetMissing(f"unknown job type {job_type!r}")

    def card_titles_of_day(self, conn: Connection, user_id: int, day: date) -> list[str]:
        start, end = day_bounds(day, self.timezone)
        return list(
            conn.execute(
                select(app_knowledge_cards.c.title)
                .join(app_scraps, app_scraps.c.id == app_knowledge_cards.c.scrap_id)
                .where(
                    app_scraps.c.user_id == user_id,
                    app_scraps.c.created_at >= start,
                    app_scraps.c.created_at < end,
                )
                .order_by(app_knowledge_cards.c.id)
            ).scalars()
        )

    def write_result(self, conn: Connection, job_type: str, target_id: int, result) -> bool:
        """Contract step 3, the result: idempotent. True if this call wrote it."""
        now = utc_now()
        if job_type == SCRAP_REFINE:
            return (
                conn.execute(
                    update(app_scraps)
                    .where(
                        and_(app_scraps.c.id == target_id, app_scraps.c.refined_content.is_(None))
                    )
                    .values(refined_content=result, updated_at=now)
                ).rowcount
                == 1
            )
        if job_type == CARD_ANALYSIS:
            user_id, card = result
            return insert_or_ignore(
                conn,
                app_knowledge_cards,
                {
                    "scrap_id": target_id,
                    "user_id": user_id,
                    "title": card.title,
                    "summary": card.summary,
                    "embedding": card.embedding,
                    "created_at": now,
                },
                unique_column="scrap_id",
            )
        return (
            conn.execute(
                update(app_daily_summaries)
                .where(
                    and_(
                        app_daily_summaries.c.id == target_id,
                        app_daily_summaries.c.content.is_(None),
                    )
                )
                .values(content=result)
            ).rowcount
            == 1
        )
