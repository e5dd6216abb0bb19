"""The recommended indexes: applied idempotently, and an earlier release's superseded index is
dropped once its replacement exists, and pointed out until then."""

from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import inspect, text

from batch_pipeline.san.indexes import ACTIVE_JOBS_INDEX, RECOMMENDED_INDEXES, SUPERSEDED_INDEXES
from batch_pipeline.san.schema import (
    IndexConflictError,
    create_recommended_indexes,
    index_advice,
)

EARLIER_UNREFINED_INDEX = (
    "CREATE INDEX ix_san_scraps_unrefined ON scraps (created_at) WHERE refined_content IS NULL"
)


def left_invalid(conn, name: str) -> None:
    """What an interrupted CREATE INDEX CONCURRENTLY leaves: the index, INVALID."""
    conn.execute(
        text("UPDATE pg_index SET indisvalid = false WHERE indexrelid = to_regclass(:name)"),
        {"name": name},
    )


def index_names(db) -> set[str]:
    with db.engine.connect() as conn:
        inspector = inspect(conn)
        return {
            ix["name"]
            for table in {index.table for index in RECOMMENDED_INDEXES}
            for ix in inspector.get_indexes(table)
        }


def test_create_indexes_replaces_the_superseded_index_and_can_run_again(san_db):
    with san_db.engine.begin() as conn:  # a database set up by an earlier release
        conn.execute(text(EARLIER_UNREFINED_INDEX))
    with san_db.engine.connect() as conn:
        advice = index_advice(conn)
    # kept until its replacement is built
    assert advice.superseded == [] and advice.superseded_kept == ["ix_san_scraps_unrefined"]
    changes = create_recommended_indexes(san_db.engine)
    assert changes.statements[-1].startswith("DROP INDEX") and changes.statements[-1].endswith(
        "IF EXISTS ix_san_scraps_unrefined"
    )
    assert changes.dropped == ["ix_san_scraps_unrefined"] and len(changes.created) == len(
        RECOMMENDED_INDEXES
    )
    names = index_names(san_db)
    assert {index.name for index in RECOMMENDED_INDEXES} <= names
    assert not set(SUPERSEDED_INDEXES) & names
    create_recommended_indexes(san_db.engine)  # idempotent
    with san_db.engine.connect() as conn:
        advice = index_advice(conn)
        assert advice.missing == [] and advice.superseded == []


def test_recommended_indexes_are_idempotent(san_db):
    with san_db.engine.connect() as conn:
        # the app's DDL has none of them
        assert len(index_advice(conn).missing) == len(RECOMMENDED_INDEXES) == 7
    create_recommended_indexes(san_db.engine)
    again = create_recommended_indexes(san_db.engine)  # again: nothing happens
    assert (
        again.statements == []
        and again.created == []
        and len(again.already_there) == len(RECOMMENDED_INDEXES)
    )
    with san_db.engine.connect() as conn:
        assert index_advice(conn).missing == []


def test_an_invalid_index_counts_as_missing_and_create_indexes_rebuilds_it(pg_db):
    from batch_pipeline.san.dialects.postgresql import has_target_index

    create_recommended_indexes(pg_db.engine)
    # what an interrupted CREATE INDEX CONCURRENTLY leaves behind
    with pg_db.engine.begin() as conn:
        left_invalid(conn, "ix_san_jobs_target")
    with pg_db.engine.connect() as conn:
        advice = index_advice(conn)
        assert [index.name for index in advice.missing] == [
            "ix_san_jobs_target"
        ] and advice.invalid == ["ix_san_jobs_target"]
        assert advice.create_with[0] == "DROP INDEX CONCURRENTLY IF EXISTS ix_san_jobs_target"
        assert not has_target_index(conn)  # the enqueue path does not count on it either
    changes = create_recommended_indexes(pg_db.engine)
    assert changes.rebuilt == ["ix_san_jobs_target"] and changes.created == []
    # has_target_index is cached per connection (each run has its own engine)
    pg_db.engine.dispose()
    with pg_db.engine.connect() as conn:
        assert index_advice(conn).missing == [] and has_target_index(conn)


SUPERSEDED_ACTIVE = "ix_san_jobs_active_created"
EARLIER_ACTIVE_INDEX = (
    f"CREATE INDEX {SUPERSEDED_ACTIVE} ON jobs (created_at) "
    "WHERE status IN ('PENDING', 'PROCESSING')"
)


def test_a_recommended_name_on_another_definition_is_a_conflict_and_nothing_is_touched(san_db):
    """Names are not trusted: a user's index named like the covering index, on jobs (id), is
    neither taken for it nor built over, and the index it supersedes is not dropped."""
    with san_db.engine.begin() as conn:
        conn.execute(text(EARLIER_ACTIVE_INDEX))
        conn.execute(text(f"CREATE INDEX {ACTIVE_JOBS_INDEX} ON jobs (id)"))
    with san_db.engine.connect() as conn:
        advice = index_advice(conn)
    assert list(advice.conflicting) == [ACTIVE_JOBS_INDEX]
    assert "(id)" in advice.conflicting[ACTIVE_JOBS_INDEX]
    assert ACTIVE_JOBS_INDEX not in {index.name for index in advice.missing}
    assert advice.superseded == [] and advice.superseded_kept == [SUPERSEDED_ACTIVE]
    before = index_names(san_db)
    with pytest.raises(IndexConflictError, match=f"{ACTIVE_JOBS_INDEX} exists as another index"):
        create_recommended_indexes(san_db.engine)
    assert index_names(san_db) == before  # nothing built, nothing dropped


def test_a_recommended_name_on_another_table_is_a_conflict(pg_db):
    with pg_db.engine.begin() as conn:
        conn.execute(text("CREATE INDEX ix_san_jobs_target ON scraps (user_id, id)"))
    with pg_db.engine.connect() as conn:
        assert list(index_advice(conn).conflicting) == ["ix_san_jobs_target"]


def test_each_recommended_index_as_built_matches_its_definition(san_db):
    create_recommended_indexes(san_db.engine)
    with san_db.engine.connect() as conn:
        advice = index_advice(conn)
    assert advice.conflicting == {} and advice.missing == []


def test_the_superseded_index_stays_until_its_replacement_is_valid(pg_db):
    create_recommended_indexes(pg_db.engine)
    with pg_db.engine.begin() as conn:
        conn.execute(text(EARLIER_ACTIVE_INDEX))
        # the replacement's build was interrupted: INVALID
        left_invalid(conn, ACTIVE_JOBS_INDEX)
    with pg_db.engine.connect() as conn:
        advice = index_advice(conn)
    assert advice.superseded == [] and advice.superseded_kept == [SUPERSEDED_ACTIVE]
    changes = create_recommended_indexes(pg_db.engine)  # rebuilds it, then drops the old one
    assert changes.rebuilt == [ACTIVE_JOBS_INDEX] and changes.dropped == [SUPERSEDED_ACTIVE]
    assert SUPERSEDED_ACTIVE not in index_names(pg_db)


def test_two_create_indexes_at_once_take_turns(pg_db):
    with pg_db.engine.begin() as conn:
        conn.execute(text(EARLIER_ACTIVE_INDEX))
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda _: create_recommended_indexes(pg_db.engine), range(2)))
    # one built everything and dropped the superseded index; the other found it done
    assert sorted(len(run.created) for run in runs) == [0, len(RECOMMENDED_INDEXES)]
    assert sorted(run.dropped for run in runs) == [[], [SUPERSEDED_ACTIVE]]
    with pg_db.engine.connect() as conn:
        advice = index_advice(conn)
    assert advice.missing == [] and advice.conflicting == {} and advice.superseded_kept == []


def test_an_invalid_index_of_another_definition_is_not_offered_for_a_rebuild(pg_db):
    with pg_db.engine.begin() as conn:
        conn.execute(text(f"CREATE INDEX {ACTIVE_JOBS_INDEX} ON jobs (id)"))
        left_invalid(conn, ACTIVE_JOBS_INDEX)
    with pg_db.engine.connect() as conn:
        advice = index_advice(conn)
    assert list(advice.conflicting) == [ACTIVE_JOBS_INDEX] and advice.invalid == []
    assert not [s for s in advice.create_with if ACTIVE_JOBS_INDEX in s]
