"""The audit trail's convention, shared by the recovery areas and the TIL: counts are always
complete; id lists stop at AUDIT_ID_LIMIT per kind and run, with `ids_truncated` saying so.

A materialization's metadata is stored in Dagster's event log and rendered by the UI: a
catch-up run listing hundreds of thousands of ids would bloat both, and serialising them
is a measurable share of the TIL op (docs/benchmarks.md, "Figures behind the code").
"""

from collections.abc import Sequence

AUDIT_ID_LIMIT = 5_000


def capped_ids(**id_lists: Sequence) -> dict:
    """Each list cut to AUDIT_ID_LIMIT, plus `ids_truncated`: whether any list was cut."""
    return {
        **{name: list(ids[:AUDIT_ID_LIMIT]) for name, ids in id_lists.items()},
        "ids_truncated": any(len(ids) > AUDIT_ID_LIMIT for ids in id_lists.values()),
    }
