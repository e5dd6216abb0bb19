"""The recommended indexes: applied idempotently, and an earlier release's superseded index is
dropped once its replacement exists, and pointed out until then."""

from sqlalchemy import inspect, text

from batch_pipeline.san.schema import (
    RECOMMENDED_INDEXES,
    SUPERSEDED_INDEXES,
    create_recommended_indexes,
    index_advice,
)

EARLIER_UNREFINED_INDEX = "CREATE INDEX ix_san_scraps_unrefined ON scraps (created_at) WHERE refined_content IS NULL"


def index_names(db) -> set[str]:
    with db.engine.connect() as conn:
        inspector = inspect(conn)
        return {ix["name"] for table in {index.table for index in RECOMMENDED_INDEXES} for ix in inspector.get_indexes(table)}


def test_create_indexes_replaces_the_superseded_index_and_can_run_again(san_db):
    with san_db.engine.begin() as conn:  # a database set up by an earlier release
        conn.execute(text(EARLIER_UNREFINED_INDEX))
    with san_db.engine.connect() as conn:
        assert index_advice(conn).superseded == ["ix_san_scraps_unrefined"]
    ran = create_recommended_indexes(san_db.engine)
    assert ran[-1].startswith("DROP INDEX") and ran[-1].endswith("IF EXISTS ix_san_scraps_unrefined")
    names = index_names(san_db)
    assert {index.name for index in RECOMMENDED_INDEXES} <= names
    assert not set(SUPERSEDED_INDEXES) & names
    create_recommended_indexes(san_db.engine)  # idempotent
    with san_db.engine.connect() as conn:
        advice = index_advice(conn)
        assert advice.missing == [] and advice.superseded == []


def test_recommended_indexes_are_idempotent(san_db):
    with san_db.engine.connect() as conn:
        assert len(index_advice(conn).missing) == len(RECOMMENDED_INDEXES) == 6  # the app's DDL has none of them
    create_recommended_indexes(san_db.engine)
    create_recommended_indexes(san_db.engine)  # again: nothing happens
    with san_db.engine.connect() as conn:
        assert index_advice(conn).missing == []
