"""The embedded default: a sandbox SQLite SAN database seeded with a small, broken SAN state, so
a new user sees every recovery do real work in the UI within a minute (and `make run` keeps it
alive with the sandbox's app and workers). `make run` (sandbox `ui`) and `sandbox seed-demo`
seed it; the product itself never does."""

from datetime import datetime, timedelta

from sqlalchemy import insert, select, text
from sqlalchemy.engine import Connection, Engine

from batch_pipeline.san.database import utc_now
from batch_pipeline.san.schema import create_recommended_indexes
from batch_pipeline.san.tables import (
    CARD_ANALYSIS,
    COMPLETED,
    FAILED,
    PENDING,
    PROCESSING,
    SCRAP_REFINE,
    jobs,
    metadata,
    scraps,
    users,
)
from san_sandbox.app_schema import (
    SANDBOX_NICKNAME,
    app_knowledge_cards,
    app_users,
    init_sandbox,
    require_sandbox,
)

DEMO_USERS = 5


def seed_demo_state(engine: Engine, now: datetime | None = None) -> dict[str, int]:
    """Create a sandbox database and a demo state: healthy scraps, ghosts, orphans and unrefined
    scraps. Relative to `now`, so yesterday has active users for the TIL job too. Returns what it
    made. Refuses (NotASandbox) a database that holds SAN data and is not a sandbox.
    """
    now = now or utc_now()
    init_sandbox(engine)
    require_sandbox(engine)  # marked once, but real users may have arrived since
    with engine.begin() as conn:
        if conn.execute(select(users.c.id).limit(1)).first():
            return {}  # already seeded
        conn.execute(
            insert(app_users),
            [{"id": i, "nickname": f"{SANDBOX_NICKNAME} {i}"} for i in range(1, DEMO_USERS + 1)],
        )
        scrap_rows, card_rows, job_rows = [], [], []
        next_job = 1

        def job(job_type, target, status, created, started=None):
            nonlocal next_job
            job_rows.append(
                {
                    "id": next_job,
                    "job_type": job_type,
                    "target_id": target,
                    "status": status,
                    "created_at": created,
                    "updated_at": started or created,
                    "started_at": started,
                    "finished_at": None
                    if status in (PENDING, PROCESSING)
                    else (started or created),
                }
            )
            next_job += 1

        for scrap_id in range(1, 31):
            user_id = (scrap_id - 1) % DEMO_USERS + 1
            created = now - timedelta(hours=3 + 1.5 * scrap_id)  # yesterday and before
            kind = scrap_id % 10
            refined = None if kind in (3, 4) else f"refined text of scrap {scrap_id}"
            scrap_rows.append(
                {
                    "id": scrap_id,
                    "user_id": user_id,
                    "original_content": f"original text of scrap {scrap_id}",
                    "refined_content": refined,
                    "created_at": created,
                    "updated_at": created,
                }
            )
            if kind == 1:  # ghost: event lost, PENDING for hours
                job(SCRAP_REFINE, scrap_id, COMPLETED, created, created)
                job(CARD_ANALYSIS, scrap_id, PENDING, created)
            elif kind == 2:  # ghost: worker died mid-job
                job(SCRAP_REFINE, scrap_id, COMPLETED, created, created)
                job(CARD_ANALYSIS, scrap_id, PROCESSING, created, created + timedelta(minutes=1))
            elif kind == 3:  # unrefined: its SCRAP_REFINE job vanished
                job(CARD_ANALYSIS, scrap_id, COMPLETED, created, created)
                card_rows.append(demo_card(scrap_id, user_id, created))
            elif kind == 4:  # unrefined and orphan: both AI calls failed
                job(SCRAP_REFINE, scrap_id, FAILED, created, created)
                job(CARD_ANALYSIS, scrap_id, FAILED, created, created)
            elif kind == 5:  # orphan: the app died before enqueueing CARD_ANALYSIS
                job(SCRAP_REFINE, scrap_id, COMPLETED, created, created)
            else:  # healthy
                job(SCRAP_REFINE, scrap_id, COMPLETED, created, created)
                job(CARD_ANALYSIS, scrap_id, COMPLETED, created, created)
                card_rows.append(demo_card(scrap_id, user_id, created))
        conn.execute(insert(scraps), scrap_rows)
        conn.execute(insert(app_knowledge_cards), card_rows)
        conn.execute(insert(jobs), job_rows)
        advance_id_sequences(conn)
    create_recommended_indexes(engine)  # as a production database should have them
    return {
        "users": DEMO_USERS,
        "scraps": len(scrap_rows),
        "cards": len(card_rows),
        "jobs": len(job_rows),
    }


def demo_card(scrap_id: int, user_id: int, created: datetime) -> dict:
    """A card as the app's worker writes one: with a title and a summary (the TIL joins them)."""
    return {
        "scrap_id": scrap_id,
        "user_id": user_id,
        "title": f"card of scrap {scrap_id}",
        "summary": f"what scrap {scrap_id} says",
        "created_at": created,
    }


def advance_id_sequences(conn: Connection) -> None:
    """After inserting explicit ids on PostgreSQL, move each identity sequence past them."""
    if conn.dialect.name != "postgresql":
        return
    for table in metadata.sorted_tables:
        conn.execute(
            text(
                f"SELECT setval(pg_get_serial_sequence('{table.name}', 'id'), "
                f"COALESCE((SELECT max(id) FROM {table.name}), 0) + 1, false)"
            )
        )
