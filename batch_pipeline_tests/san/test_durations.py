"""Durations in words, for descriptions built from the constants."""

from datetime import timedelta

from batch_pipeline.san.durations import in_words


def test_the_largest_unit_that_divides_it():
    assert in_words(timedelta(hours=2)) == "2 h"
    assert in_words(timedelta(minutes=90)) == "90 min"
    assert in_words(timedelta(seconds=15)) == "15 s"
    assert in_words(timedelta(seconds=1.5)) == "1.5 s"
    assert in_words(timedelta(days=3)) == "3 d"
