"""The recommended indexes: applied idempotently, and an earlier release's superseded index is
dropped once its replacement exists, and pointed out until then."""

from sqlalchemy import inspect, text

from batch_pipeline.san.schema import (
    RECOMMENDED_INDEXES,
    SUPERSEDED_INDEXES,
    create_recommended_indexes,
    missing_recommended_indexes,
    superseded_indexes_present,
)

EARLIER_UNREFINED_INDEX = "CREATE INDEX ix_san_scraps_unrefined ON scraps (created_at) WHERE refined_content IS NULL"


def index_names(db) -> set[str]:
    with db.engine.connect() as conn:
        inspector = inspect(conn)
        return {ix["name"] for table in ("jobs", "scraps") for ix in inspector.get_indexes(table)}


def test_create_indexes_replaces_the_superseded_index_and_can_run_again(san_db):
    with san_db.engine.begin() as conn:  # a database set up by an earlier release
        conn.execute(text(EARLIER_UNREFINED_INDEX))
    with san_db.engine.connect() as conn:
        assert superseded_indexes_present(conn) == ["ix_san_scraps_unrefined"]
    ran = create_recommended_indexes(san_db.engine)
    assert ran[-1].startswith("DROP INDEX") and ran[-1].endswith("IF EXISTS ix_san_scraps_unrefined")
    names = index_names(san_db)
    assert {index.name for index in RECOMMENDED_INDEXES} <= names
    assert not set(SUPERSEDED_INDEXES) & names
    create_recommended_indexes(san_db.engine)  # idempotent
    with san_db.engine.connect() as conn:
        assert missing_recommended_indexes(conn) == [] and superseded_indexes_present(conn) == []
