"""The audit trail's id cap, shared by the recoveries and the TIL."""

from batch_pipeline.san.audit import AUDIT_ID_LIMIT, capped_ids


def test_lists_are_cut_at_the_limit_and_the_cut_is_reported():
    long, short = list(range(AUDIT_ID_LIMIT + 1)), [1, 2]
    capped = capped_ids(recovered=long, exhausted_ids=short)
    assert capped["recovered"] == long[:AUDIT_ID_LIMIT] and capped["exhausted_ids"] == short
    assert capped["ids_truncated"] is True


def test_nothing_is_cut_at_exactly_the_limit():
    capped = capped_ids(job_ids=list(range(AUDIT_ID_LIMIT)))
    assert len(capped["job_ids"]) == AUDIT_ID_LIMIT and capped["ids_truncated"] is False
