"""The recommended indexes, declared: each named once, justified, with a body per dialect, and
every superseded index replaced by one of them."""

from batch_pipeline.san.dialects import DIALECTS
from batch_pipeline.san.indexes import APP_ONE_ACTIVE_JOB, RECOMMENDED_INDEXES, SUPERSEDED_INDEXES
from batch_pipeline.san.tables import metadata


def test_each_index_is_declared_once_on_a_san_table_and_says_why():
    names = [index.name for index in RECOMMENDED_INDEXES]
    assert len(names) == len(set(names)) and all(name.startswith("ix_san_") for name in names)
    for index in (*RECOMMENDED_INDEXES, APP_ONE_ACTIVE_JOB):
        assert index.table in metadata.tables and index.why
        for name in DIALECTS:
            assert getattr(index, name).startswith(f"{index.table} (")


def test_every_superseded_index_has_its_replacement_among_the_recommended():
    names = {index.name for index in RECOMMENDED_INDEXES}
    assert set(SUPERSEDED_INDEXES.values()) <= names
    assert not set(SUPERSEDED_INDEXES) & names


def test_only_the_app_side_guarantee_is_unique():
    assert APP_ONE_ACTIVE_JOB.unique and not any(index.unique for index in RECOMMENDED_INDEXES)
