"""Seed a SAN database at a chosen scale, set-based (generate_series), with the app's own DDL.

Scale 1: 100,000 users; 2,000,000 scraps over 90 days; a card for 99 % of them; refined_content
for 98 %; two jobs per scrap (mostly COMPLETED, FAILED where the work is missing, plus 5 % FAILED
history); 20,000 stale PENDING and 5,000 stale PROCESSING jobs (half of those with NULL
started_at); 50,000 healthy active jobs; 60 days of daily summaries with their TIL jobs, 1 % of
them never written (content NULL, the TIL_GENERATION job FAILED: 12,000 unwritten TILs);
about 20,000 active users yesterday.
"""

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from san_sandbox.app_schema import APP_DDL


@dataclass(frozen=True)
class Scale:
    factor: float

    @property
    def users(self) -> int:
        return max(100, int(100_000 * self.factor))

    @property
    def scraps(self) -> int:
        return max(2_000, int(2_000_000 * self.factor))

    @property
    def summaries_per_day(self) -> int:
        return max(20, int(20_000 * self.factor))


# Scraps get ids in created_at order (2 minutes of jitter), as a real, append-only table does:
# a table whose physical order is unrelated to created_at makes every created_at range scan and
# every batch of oldest-first ids read the whole table, which no SAN database does.
#
# The healthy active jobs are stamped a day ahead of the seed's clock: a scale-10 benchmark runs
# for an hour, and jobs stamped "now" would be genuinely stale (by the pipeline's real clock) by
# the time a run reads them, while the baseline (given the seed's instant) would leave them.
HEALTHY_AHEAD = timedelta(days=1)

# Which scraps are broken is decided by id modulo, so every scale has the same proportions:
#   id % 100 = 7   no knowledge card (1 %: orphans; their CARD_ANALYSIS FAILED)
#   id % 50  = 0   refined_content NULL (2 %: unrefined; their SCRAP_REFINE FAILED)
#   id % 100 = 11  a third job, CARD_ANALYSIS stuck PENDING 1-5 h (1 %: 20,000 ghosts)
#   id % 400 = 13  a third job, SCRAP_REFINE stuck PROCESSING 2-6 h (0.25 %: 5,000 ghosts)
#   id % 40  = 17  a third job, healthy active: PENDING or PROCESSING, stamped HEALTHY_AHEAD (2.5 %)
#   id % 20  = 3   an extra FAILED SCRAP_REFINE in its history (5 %)
SEED_STATEMENTS = [
    "SELECT setseed(0.42)",
    "INSERT INTO users (id, nickname, created_at) SELECT g, 'user ' || g, :now FROM "
    "generate_series(1, :users) g",
    """
    INSERT INTO scraps (id, user_id, source_url, original_content, refined_content, content_hash,
        created_at, updated_at)
    SELECT g, 1 + floor(random() * :users)::bigint, 'https://example.org/' || g,
        'original text of scrap ' || g,
           CASE WHEN g % 50 = 0 THEN NULL ELSE 'refined text of scrap ' || g END, md5(g::text),
               ts, ts
    FROM (SELECT g, :now - interval '15 minutes' - (1 - g::float8 / :scraps) * interval '90 days'
                    - random() * interval '2 minutes' AS ts
          FROM generate_series(1, :scraps) g) s
    """,
    """
    INSERT INTO knowledge_cards (scrap_id, user_id, title, summary, embedding, created_at)
    SELECT id, user_id, 'card ' || id, 'summary', ARRAY[0.1, 0.2, 0.3]::real[],
        created_at + interval '1 minute'
    FROM scraps WHERE id % 100 <> 7
    """,
    """
    INSERT INTO jobs (job_type, target_id, status, created_at, updated_at, started_at,
        finished_at, error_message)
    SELECT 'SCRAP_REFINE', id, 'FAILED', created_at, created_at, created_at, created_at,
        'AI call failed'
    FROM scraps WHERE id % 20 = 3
    """,
    """
    INSERT INTO jobs (job_type, target_id, status, created_at, updated_at, started_at,
        finished_at, error_message)
    SELECT 'SCRAP_REFINE', id, CASE WHEN refined_content IS NULL THEN 'FAILED' ELSE 'COMPLETED' END,
           created_at, created_at, created_at, created_at + interval '20 seconds',
           CASE WHEN refined_content IS NULL THEN 'AI call failed' END
    FROM scraps
    """,
    """
    INSERT INTO jobs (job_type, target_id, status, created_at, updated_at, started_at,
        finished_at, error_message)
    SELECT 'CARD_ANALYSIS', id, CASE WHEN id % 100 = 7 THEN 'FAILED' ELSE 'COMPLETED' END,
           created_at, created_at, created_at, created_at + interval '40 seconds',
           CASE WHEN id % 100 = 7 THEN 'AI call failed' END
    FROM scraps
    """,
    """
    INSERT INTO jobs (job_type, target_id, status, created_at, updated_at)
    SELECT 'CARD_ANALYSIS', id, 'PENDING', ts, ts
    FROM (SELECT id, :now - interval '1 hour' - random() * interval '4 hours' AS ts
        FROM scraps WHERE id % 100 = 11) s
    """,
    """
    INSERT INTO jobs (job_type, target_id, status, created_at, updated_at, started_at)
    SELECT 'SCRAP_REFINE', id, 'PROCESSING', ts - interval '1 minute', ts,
        CASE WHEN id % 800 = 13 THEN ts END
    FROM (SELECT id, :now - interval '2 hours' - random() * interval '4 hours' AS ts
        FROM scraps WHERE id % 400 = 13) s
    """,
    """
    INSERT INTO jobs (job_type, target_id, status, created_at, updated_at, started_at)
    SELECT CASE WHEN id % 80 = 17 THEN 'CARD_ANALYSIS' ELSE 'SCRAP_REFINE' END, id,
           CASE WHEN id % 3 = 0 THEN 'PROCESSING' ELSE 'PENDING' END, ts, ts,
           CASE WHEN id % 3 = 0 THEN ts END
    FROM (SELECT id, :healthy_at - random() * interval '20 minutes' AS ts FROM scraps
        WHERE id % 40 = 17) s
    """,
    """
    INSERT INTO daily_summaries (user_id, target_date, content, created_at)
    SELECT 1 + (g * 7919 + d * 104729) % :users, (:now - d * interval '1 day')::date,
           CASE WHEN g % 100 = 5 THEN NULL ELSE 'TIL text' END,
               :now - d * interval '1 day' + interval '3 hours'
    FROM generate_series(2, 61) d, generate_series(1, :summaries_per_day) g
    """,
    """
    INSERT INTO jobs (job_type, target_id, status, created_at, updated_at, started_at,
        finished_at, error_message)
    SELECT 'TIL_GENERATION', id, CASE WHEN content IS NULL THEN 'FAILED' ELSE 'COMPLETED' END,
           created_at, created_at, created_at, created_at + interval '1 minute',
           CASE WHEN content IS NULL THEN 'AI call failed' END
    FROM daily_summaries
    """,
]

# ids were given explicitly: move the identity sequences past them.
RESET_SEQUENCES = [
    f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT coalesce(max(id), 0) + 1 FROM "
    f"{table}), false)"
    for table in ("users", "scraps", "knowledge_cards", "jobs", "daily_summaries")
]


def seed(conn, scale: Scale, now: datetime) -> None:
    """Create the app's tables and fill them; `conn` is a psycopg connection in autocommit."""
    conn.execute(APP_DDL.read_text())
    params = {
        "now": now,
        "healthy_at": now + HEALTHY_AHEAD,
        "users": scale.users,
        "scraps": scale.scraps,
        "summaries_per_day": scale.summaries_per_day,
    }
    for statement in SEED_STATEMENTS:
        conn.execute(_named_to_pyformat(statement), params)
    for statement in RESET_SEQUENCES:
        conn.execute(statement)
    conn.execute("VACUUM ANALYZE")


def _named_to_pyformat(sql: str) -> str:

    return re.sub(r"(?<!:):(\w+)", r"%(\1)s", sql.replace("%", "%%"))
