"""What only the SQLite dialect does: every transaction takes the write lock at its start, and
foreign keys are enforced."""

import threading
import time

import pytest
from sqlalchemy import insert, text
from sqlalchemy.exc import IntegrityError

from batch_pipeline.san.dialects import sqlite
from batch_pipeline.san.tables import CARD_ANALYSIS, scraps
from batch_pipeline_tests.conftest import make_sqlite_db


def test_two_writers_take_turns_from_the_start_of_their_transactions(tmp_path):
    """BEGIN IMMEDIATE: the second transaction waits for the first before it reads anything, so
    two writers can never both read "no active job"."""
    db = make_sqlite_db(tmp_path)
    order = []
    first_holds = threading.Event()

    def first():
        with db.engine.begin() as conn:
            conn.execute(text("SELECT 1"))
            order.append("first began")
            first_holds.set()
            time.sleep(0.5)
            order.append("first commits")

    thread = threading.Thread(target=first)
    thread.start()
    first_holds.wait(5)
    with db.engine.begin():
        order.append("second began")
    thread.join()
    assert order == ["first began", "first commits", "second began"]


def test_foreign_keys_are_enforced(tmp_path):
    db = make_sqlite_db(tmp_path)
    with pytest.raises(IntegrityError), db.engine.begin() as conn:
        conn.execute(
            insert(scraps).values(
                user_id=12345, original_content="x", created_at=db.now, updated_at=db.now
            )
        )


def test_the_database_clock_is_sqlites_own_in_utc(tmp_path):
    db = make_sqlite_db(tmp_path)
    db.job(CARD_ANALYSIS, 1)
    with db.engine.begin() as conn:
        now = sqlite.database_now(conn)
    assert now.utcoffset().total_seconds() == 0
    assert abs((now - db.now).total_seconds()) < 60


def test_sqlite_has_no_load_to_read_and_the_throttle_keeps_the_batch_time_rule(tmp_path):
    db = make_sqlite_db(tmp_path)
    assert sqlite.read_load(db.engine) is None
