"""PostgreSQL's catalog probes: cached per connection."""

from batch_pipeline.san.dialects import postgresql
from batch_pipeline.san.schema import create_recommended_indexes


def test_the_target_index_probe_is_cached_per_connection(pg_db):
    with pg_db.engine.connect() as conn:
        assert postgresql.has_target_index(conn) is False
    create_recommended_indexes(pg_db.engine)
    pg_db.engine.dispose()  # a new connection asks again
    with pg_db.engine.connect() as conn:
        assert postgresql.has_target_index(conn) is True
        assert postgresql.has_unique_job_index(conn) is False
