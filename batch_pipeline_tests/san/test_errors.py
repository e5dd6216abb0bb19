"""Errors as one line: the driver's first line, and the innermost cause behind a wrapper."""

import psycopg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

from batch_pipeline.san.errors import first_line, root_line


def test_a_driver_error_gives_its_own_first_line():
    engine = create_engine("postgresql+psycopg://postgres@127.0.0.1:5432/no_such_database_here")
    with pytest.raises(OperationalError) as raised:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    assert isinstance(raised.value.orig, psycopg.OperationalError)
    assert 'database "no_such_database_here" does not exist' in first_line(raised.value)
    assert "\n" not in first_line(raised.value)


def test_a_wrapper_is_read_through_to_its_cause():
    try:
        try:
            raise ConnectionError('FATAL: database "bp" does not exist\nDETAIL: more')
        except ConnectionError as inner:
            raise RuntimeError("too many retries for DB connection") from inner
    except RuntimeError as outer:
        assert first_line(outer) == "too many retries for DB connection"
        assert root_line(outer) == 'FATAL: database "bp" does not exist'


def test_an_error_without_a_message_is_named_by_its_type():
    assert first_line(TimeoutError()) == "TimeoutError"
