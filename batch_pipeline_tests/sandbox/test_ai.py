"""The AI stand-in: deterministic, and a poison scrap fails every call."""

import pytest

from san_sandbox.ai import (
    EMBEDDING_DIMENSIONS,
    POISON_MARKER,
    AiCallFailed,
    analyse,
    refine,
    write_til,
)


def test_the_same_input_gives_the_same_output():
    text = "Notes on B-trees.  Read 5 minutes.   Key idea number 2."
    assert refine(text) == refine(text) == "Notes on B-trees.\nRead 5 minutes.\nKey idea number 2."
    card = analyse(text)
    assert card == analyse(text) and len(card.embedding) == EMBEDDING_DIMENSIONS
    assert abs(sum(x * x for x in card.embedding) - 1) < 1e-4  # a unit vector
    assert write_til("2026-12-01", ["a", "b"]) == write_til("2026-12-01", ["a", "b"])


def test_a_poison_scrap_fails_every_call():
    for call in (refine, analyse):
        with pytest.raises(AiCallFailed, match="poison"):
            call(f"{POISON_MARKER} anything")
