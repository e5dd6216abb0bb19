"""The fused enqueue statement (with ix_san_jobs_target): one statement a batch, compiled once."""

from batch_pipeline.san.database import write_transaction
from batch_pipeline.san.enqueue import enqueue_jobs
from batch_pipeline.san.job_source import EnqueueRequest
from batch_pipeline.san.tables import CARD_ANALYSIS
from batch_pipeline_tests.conftest import san_database_on_path


def test_a_batchs_statement_is_compiled_once_and_reused_by_the_next(tmp_path):
    """SQLAlchemy caches a compiled statement only if every part of it can be cached; the
    PostgreSQL dialect's INSERT never can (for its ON CONFLICT clause), so only the path that
    needs ON CONFLICT uses it: otherwise every batch compiled its fused statement anew."""
    with san_database_on_path("postgres_with_target_index", tmp_path) as db:
        cache: dict = {}
        for targets in ([1, 2, 3], [4, 5]):  # two batches of different sizes: one statement
            with write_transaction(db.engine) as conn:
                conn.execution_options(compiled_cache=cache)
                enqueue_jobs(
                    conn,
                    CARD_ANALYSIS,
                    [EnqueueRequest(t) for t in targets],
                    now=db.now,
                    max_attempts=10,
                )
        inserts = [compiled for compiled in cache.values() if "INSERT INTO jobs" in str(compiled)]
        assert len(inserts) == 1
        assert [j.target_id for j in db.jobs()] == [1, 2, 3, 4, 5]
