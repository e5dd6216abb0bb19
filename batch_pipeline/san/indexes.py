"""The recommended indexes: not part of the app's DDL, applied by `python -m batch_pipeline
create-indexes` (san/schema.py builds them; each dialect writes their DDL). Each one is
justified in docs/benchmarks.md. Plain data: the dialects read it without importing the code
that builds them."""

from dataclasses import dataclass


@dataclass(frozen=True)
class RecommendedIndex:
    name: str
    table: str
    why: str
    postgresql: str  # the body after "ON": columns, INCLUDE and WHERE
    sqlite: str
    unique: bool = False


# Named by the code that reads through it: ghost detection, the fast lane, the metrics benchmark.
ACTIVE_JOBS_INDEX = "ix_san_jobs_active_covering"
SCRAPS_CREATED_AT_INDEX = "ix_san_scraps_created_at"  # the TIL day's chunks

RECOMMENDED_INDEXES = (
    RecommendedIndex(
        name="ix_san_jobs_target",
        table="jobs",
        why="attempt counts and the 'no active job' check look jobs up by (target_id, job_type)",
        postgresql="jobs (target_id, job_type) INCLUDE (status)",
        sqlite="jobs (target_id, job_type, status)",
    ),
    RecommendedIndex(
        name=ACTIVE_JOBS_INDEX,
        table="jobs",
        why="ghost detection and the metrics endpoint read only the few active jobs, not the "
        "whole jobs history; the endpoint counts them by type, status and age from the index "
        "alone",
        postgresql="jobs (created_at) INCLUDE (job_type, status, started_at, updated_at) "
        "WHERE status IN ('PENDING', 'PROCESSING')",
        sqlite="jobs (created_at, job_type, status, started_at, updated_at) "
        "WHERE status IN ('PENDING', 'PROCESSING')",
    ),
    RecommendedIndex(
        name="ix_san_jobs_failed_updated",
        table="jobs",
        why="the fast lane's probe reads only the last hours' failed jobs, not every failure ever",
        postgresql="jobs (updated_at) INCLUDE (job_type, target_id) WHERE status = 'FAILED'",
        sqlite="jobs (updated_at, job_type, target_id) WHERE status = 'FAILED'",
    ),
    RecommendedIndex(
        name=SCRAPS_CREATED_AT_INDEX,
        table="scraps",
        why="TIL detection reads one day of scraps by a created_at range, in chunks",
        postgresql="scraps (created_at)",
        sqlite="scraps (created_at)",
    ),
    RecommendedIndex(
        name="ix_san_scraps_unrefined_by_id",
        table="scraps",
        why="unrefined detection reads only scraps whose refined_content is still NULL, and the "
        "write-time re-check probes it by id, both without reading the scraps themselves",
        postgresql="scraps (id) INCLUDE (created_at, user_id) WHERE refined_content IS NULL",
        sqlite="scraps (id, created_at, user_id) WHERE refined_content IS NULL",
    ),
    RecommendedIndex(
        name="ix_san_jobs_unknown_status",
        table="jobs",
        why="the unknown_job_statuses check, run in every recovery run, reads only jobs whose "
        "status "
        "batch_pipeline does not know (usually none) instead of every job",
        postgresql="jobs (status) WHERE status NOT IN ('PENDING', 'PROCESSING', 'COMPLETED', "
        "'FAILED')",
        sqlite="jobs (status) WHERE status NOT IN ('PENDING', 'PROCESSING', 'COMPLETED', 'FAILED')",
    ),
    RecommendedIndex(
        name="ix_san_daily_summaries_unwritten_by_id",
        table="daily_summaries",
        why="unwritten-TIL detection reads only summaries whose content is still NULL, and the "
        "write-time re-check probes it by id, both without reading the summaries themselves",
        postgresql="daily_summaries (id) INCLUDE (created_at, user_id) WHERE content IS NULL",
        sqlite="daily_summaries (id, created_at, user_id) WHERE content IS NULL",
    ),
)

# The app-side guarantee: at most one active job per (job_type, target_id), whoever inserts
# it. The app's own enqueue does not take batch_pipeline's advisory lock, so without it the
# two can race into two active jobs for one target (River's and Oban's unique jobs do the
# same). batch_pipeline inserts with ON CONFLICT DO NOTHING, so with it a race is a skipped
# row (skipped_by_race), never a failed batch. `create-indexes` does not build it: it changes
# the app's own behaviour (its second enqueue of an active target then fails), so it is SAN's
# team's decision; `show-indexes` and `doctor` offer it, its cost is in docs/benchmarks.md.
APP_ONE_ACTIVE_JOB = RecommendedIndex(
    name="ux_san_jobs_one_active",
    table="jobs",
    why="at most one PENDING/PROCESSING job per (job_type, target_id), whoever enqueues it",
    postgresql="jobs (job_type, target_id) WHERE status IN ('PENDING', 'PROCESSING')",
    sqlite="jobs (job_type, target_id) WHERE status IN ('PENDING', 'PROCESSING')",
    unique=True,
)


# Indexes an earlier release recommended and a newer one replaces: `create-indexes` drops them
# once their replacement exists; `doctor` and the recovery_indexes check point them out.
SUPERSEDED_INDEXES = {
    # keyed by created_at: the re-check could not probe it by id and read every scrap's heap page
    "ix_san_scraps_unrefined": "ix_san_scraps_unrefined_by_id",
    # created_at only: counting the active jobs by type and status fetched each from the heap
    "ix_san_jobs_active_created": "ix_san_jobs_active_covering",
}
