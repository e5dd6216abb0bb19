"""The raw-SQL limit: the same work as the pipeline, one set-based statement per area.

Hand-written for the benchmark only: no batches, no audit trail, no per-run cap. It applies the
same rules (thresholds, grace, poison cap, no second active job) and announces every new job
with pg_notify, as the pipeline does on PostgreSQL. Each statement returns the number of jobs
it created.
"""

# Appended to every statement: announce the inserted jobs and count them.
ANNOUNCE = """
SELECT count(pg_notify('san_jobs', json_build_object('job_id', id, 'job_type', job_type,
    'target_id', target_id)::text))
FROM inserted
"""

GHOST_RECOVERY = (
    """
WITH stale AS (
    SELECT id FROM jobs
    WHERE status IN ('PENDING', 'PROCESSING')
      AND ((status = 'PENDING' AND created_at < %(pending_cutoff)s)
        OR (status = 'PROCESSING' AND coalesce(started_at, updated_at) < %(processing_cutoff)s))
    FOR UPDATE SKIP LOCKED
), failed AS (
    UPDATE jobs j SET status = 'FAILED', finished_at = %(now)s, updated_at = %(now)s,
                      error_message = 'stale ' || j.status
    FROM stale WHERE j.id = stale.id
    RETURNING j.id, j.job_type, j.target_id
), attempts AS (
    SELECT a.job_type, a.target_id, count(*) AS n
    FROM jobs a JOIN (SELECT DISTINCT job_type, target_id FROM failed) f USING (job_type, target_id)
    GROUP BY a.job_type, a.target_id
), inserted AS (
    INSERT INTO jobs (job_type, target_id, status, created_at, updated_at, retry_of_job_id)
    SELECT f.job_type, f.target_id, 'PENDING', %(now)s, %(now)s, f.id
    FROM failed f JOIN attempts USING (job_type, target_id)
    WHERE attempts.n < %(max_attempts)s
    RETURNING id, job_type, target_id
)"""
    + ANNOUNCE
)

# Attempts as a join + GROUP BY over the candidates: with the index PostgreSQL probes it per
# candidate, without it one hash join replaces a scan of jobs per candidate.
TARGET_RECOVERY = (
    """
WITH candidates AS (
    SELECT t.id FROM {table} t
    WHERE t.created_at < %(grace_cutoff)s AND {needs_work}
      AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.target_id = t.id
          AND j.job_type = CAST(%(job_type)s AS varchar)
                      AND j.status IN ('PENDING', 'PROCESSING'))
), attempts AS (
    SELECT a.target_id, count(*) AS n FROM jobs a JOIN candidates c ON a.target_id = c.id
    WHERE a.job_type = CAST(%(job_type)s AS varchar) GROUP BY a.target_id
), inserted AS (
    INSERT INTO jobs (job_type, target_id, status, created_at, updated_at)
    SELECT CAST(%(job_type)s AS varchar), c.id, 'PENDING', %(now)s, %(now)s
    FROM candidates c LEFT JOIN attempts a ON a.target_id = c.id
    WHERE coalesce(a.n, 0) < %(max_attempts)s
    RETURNING id, job_type, target_id
)"""
    + ANNOUNCE
)
ORPHAN_RECOVERY = TARGET_RECOVERY.format(
    table="scraps",
    needs_work="NOT EXISTS (SELECT 1 FROM knowledge_cards k WHERE k.scrap_id = t.id)",
)
UNREFINED_RECOVERY = TARGET_RECOVERY.format(table="scraps", needs_work="t.refined_content IS NULL")
UNWRITTEN_TIL_RECOVERY = TARGET_RECOVERY.format(
    table="daily_summaries", needs_work="t.content IS NULL"
)

TIL_GENERATION = (
    """
WITH active AS (
    SELECT s.user_id FROM scraps s JOIN knowledge_cards k ON k.scrap_id = s.id
    WHERE s.created_at >= %(day_start)s AND s.created_at < %(day_end)s
    GROUP BY s.user_id
), summaries AS (
    INSERT INTO daily_summaries (user_id, target_date, created_at)
    SELECT user_id, %(day)s, %(now)s FROM active
    RETURNING id
), inserted AS (
    INSERT INTO jobs (job_type, target_id, status, created_at, updated_at)
    SELECT 'TIL_GENERATION', id, 'PENDING', %(now)s, %(now)s FROM summaries
    RETURNING id, job_type, target_id
)"""
    + ANNOUNCE
)

# One statement per recovery of the registry, keyed by its area (a test keeps the two in step).
RECOVERY_SQL = {
    "ghost_job_recovery": (GHOST_RECOVERY, {}),
    "orphan_scrap_recovery": (ORPHAN_RECOVERY, {"job_type": "CARD_ANALYSIS"}),
    "orphan_scrap_refine_recovery": (UNREFINED_RECOVERY, {"job_type": "SCRAP_REFINE"}),
    "til_generation_recovery": (UNWRITTEN_TIL_RECOVERY, {"job_type": "TIL_GENERATION"}),
}
