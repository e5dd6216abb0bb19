"""PostgreSQL arrays: a batch of ids is one array literal."""

from batch_pipeline.san.dialects import postgresql


def test_a_batch_of_ids_is_one_array_literal():
    process = postgresql.BigIntArray.bind_processor(None)
    assert process([3, 1, 2]) == "{3,1,2}"
    assert process([1, None]) == "{1,NULL}"
    assert process(None) is None
