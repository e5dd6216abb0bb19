"""A deterministic local stand-in for SAN's AI server: same input, same output, no network.

A "poison" scrap (its text carries POISON_MARKER) makes every call fail, as real content that
crashes the model would.
"""

import hashlib
import struct
from dataclasses import dataclass

POISON_MARKER = "[sandbox:poison]"
EMBEDDING_DIMENSIONS = 8


class AiCallFailed(RuntimeError):
    """The AI server returned an error (the sandbox's fault knob, or a poison scrap)."""


@dataclass(frozen=True)
class Card:
    title: str
    summary: str
    embedding: list[float]


def _refuse_poison(text: str) -> None:
    if POISON_MARKER in text:
        raise AiCallFailed("the AI server cannot process this content (poison scrap)")


def refine(original: str) -> str:
    """SCRAP_REFINE: clean the text (collapse whitespace, one sentence per line)."""
    _refuse_poison(original)
    return "\n".join(
        part.strip() + "." for part in " ".join(original.split()).split(".") if part.strip()
    )


def analyse(text: str) -> Card:
    """CARD_ANALYSIS: a title, a summary and a small unit embedding derived from the text."""
    _refuse_poison(text)
    words = text.split()
    digest = hashlib.blake2b(text.encode(), digest_size=4 * EMBEDDING_DIMENSIONS).digest()
    raw = [value / 2**31 - 1.0 for value in struct.unpack(f"<{EMBEDDING_DIMENSIONS}I", digest)]
    norm = sum(x * x for x in raw) ** 0.5 or 1.0
    return Card(
        title=" ".join(words[:6]) or "(empty)",
        summary=" ".join(words[:30]),
        embedding=[round(x / norm, 6) for x in raw],
    )


def write_til(day: str, card_titles: list[str]) -> str:
    """TIL_GENERATION: the day's summary from the user's card titles."""
    if not card_titles:
        return f"TIL {day}: nothing new."
    # knowledge_cards.title is nullable in the app's DDL: an untitled card is still learned
    titles = [title or "(untitled card)" for title in card_titles]
    return f"TIL {day}: you learned {len(titles)} thing(s): " + "; ".join(titles)
