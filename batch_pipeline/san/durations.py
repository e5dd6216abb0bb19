"""Durations in words, for descriptions built from the constants (never written by hand)."""

from datetime import timedelta


def in_words(delta: timedelta) -> str:
    """The largest unit that divides it: 2 h, 30 min, 15 s, 1.5 s."""
    seconds = delta.total_seconds()
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)} {unit}"
    return f"{seconds:g} s"
