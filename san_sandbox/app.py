"""The SAN application's side: users saving scraps, the way the app does it.

Saving a scrap is three steps, and the app can die between them: (1) the scrap row commits,
(2) its SCRAP_REFINE and CARD_ANALYSIS jobs commit, (3) the event is published (pg_notify in
the jobs' transaction, or XADD after it). A death after (1) leaves a scrap without jobs: an
orphan and unrefined scrap, for the scrap recoveries.
"""

import random
from dataclasses import dataclass, field

from sqlalchemy import func, insert, select
from sqlalchemy.engine import Engine

from batch_pipeline.san.database import utc_now
from batch_pipeline.san.dispatch import Dispatcher, NewJob
from batch_pipeline.san.tables import CARD_ANALYSIS, PENDING, SCRAP_REFINE, jobs
from san_sandbox.ai import POISON_MARKER
from san_sandbox.app_schema import (
    SANDBOX_NICKNAME,
    app_scraps,
    app_users,
    require_sandbox,
)
from san_sandbox.faults import Faults

TOPICS = [
    "PostgreSQL partial indexes and HOT updates",
    "Dagster schedules and partitions",
    "idempotent workers",
    "exponential backoff",
    "the CAP theorem",
    "vector embeddings",
    "Korean grammar particles",
    "spaced repetition",
    "the Rust borrow checker",
    "B-tree page splits",
]


@dataclass
class LoadReport:
    scraps: int = 0
    app_deaths: int = 0  # scraps saved without jobs
    poison: int = 0
    jobs: int = 0
    poison_scrap_ids: list[int] = field(default_factory=list)
    app_death_scrap_ids: list[int] = field(default_factory=list)


def ensure_users(engine: Engine, count: int) -> list[int]:
    """At least `count` users; returns the first `count` ids."""
    with engine.begin() as conn:
        have = conn.execute(select(func.count()).select_from(app_users)).scalar_one()
        if have < count:
            conn.execute(
                insert(app_users),
                [
                    {"nickname": f"{SANDBOX_NICKNAME} {i}", "created_at": utc_now()}
                    for i in range(have, count)
                ],
            )
        return list(
            conn.execute(select(app_users.c.id).order_by(app_users.c.id).limit(count)).scalars()
        )


def scrap_text(rng: random.Random, poison: bool) -> str:
    topic = rng.choice(TOPICS)
    minutes, idea = rng.randint(1, 40), rng.randint(1, 9)
    text = f"Notes on {topic}.  Read {minutes} minutes.   Key idea number {idea} about {topic}."
    return f"{POISON_MARKER} {text}" if poison else text


def save_scraps(
    engine: Engine,
    dispatcher: Dispatcher,
    *,
    count: int,
    users: int,
    faults: Faults = Faults(),
    rng: random.Random | None = None,
) -> LoadReport:
    """`count` users' scraps saved one by one, as the app does, with the app's faults."""
    rng = rng or random.Random(faults.seed)
    require_sandbox(engine)
    user_ids = ensure_users(engine, users)
    report = LoadReport()
    for _ in range(count):
        poison = rng.random() < faults.poison
        dies = rng.random() < faults.app_dies_before_enqueue
        now = utc_now()
        with engine.begin() as conn:  # (1) the scrap
            scrap_id = conn.execute(
                insert(app_scraps)
                .values(
                    user_id=rng.choice(user_ids),
                    source_url=f"https://example.org/{rng.randint(1, 10**9)}",
                    original_content=scrap_text(rng, poison),
                    created_at=now,
                    updated_at=now,
                )
                .returning(app_scraps.c.id)
            ).scalar_one()
        report.scraps += 1
        if poison:
            report.poison += 1
            report.poison_scrap_ids.append(scrap_id)
        if dies:
            report.app_deaths += 1
            report.app_death_scrap_ids.append(scrap_id)
            continue
        with engine.begin() as conn:  # (2) its jobs, (3) the event
            created = [
                NewJob(
                    job_id=conn.execute(
                        insert(jobs)
                        .values(
                            job_type=job_type,
                            target_id=scrap_id,
                            status=PENDING,
                            created_at=now,
                            updated_at=now,
                        )
                        .returning(jobs.c.id)
                    ).scalar_one(),
                    job_type=job_type,
                    target_id=scrap_id,
                )
                for job_type in (SCRAP_REFINE, CARD_ANALYSIS)
            ]
            dispatcher.announce_in_transaction(conn, created)
        dispatcher.announce_after_commit(created)
        report.jobs += len(created)
    return report
