"""Time travel ages every SAN timestamp by the same amount, and only in a sandbox."""

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select, text, update

from batch_pipeline.san.dispatch import Dispatcher
from batch_pipeline.san.tables import scraps
from batch_pipeline_tests.sandbox.conftest import ListedEvents
from san_sandbox.app import save_scraps
from san_sandbox.app_schema import SAN_TABLES, TIMESTAMP_COLUMNS, NotASandbox
from san_sandbox.time_travel import age_database
from san_sandbox.worker import ReferenceWorker


def timestamps(db) -> dict:
    found = {}
    with db.engine.connect() as conn:
        for table in SAN_TABLES:
            columns = [table.c[name] for name in TIMESTAMP_COLUMNS[table.name]]
            for row in conn.execute(select(table.c.id, *columns)):
                for name, value in zip(TIMESTAMP_COLUMNS[table.name], row[1:], strict=True):
                    if value is not None and value.tzinfo is None:
                        value = value.replace(tzinfo=UTC)
                    found[(table.name, row.id, name)] = value
    return found


def test_every_timestamp_moves_back_by_the_same_amount_and_nulls_stay_null(sandbox):
    save_scraps(sandbox.engine, Dispatcher(), count=3, users=2)
    first_job = sandbox.jobs()[0].id
    ReferenceWorker(
        sandbox.engine, ListedEvents([first_job])
    ).drain()  # some started/finished set, some NULL
    before = timestamps(sandbox)
    assert any(v is None for v in before.values()) and len(before) > 20

    age_database(sandbox.engine, timedelta(hours=2, seconds=1))

    after = timestamps(sandbox)
    assert after.keys() == before.keys()
    for key, value in before.items():
        assert after[key] == (None if value is None else value - timedelta(hours=2, seconds=1)), key


def test_a_fraction_just_under_a_second_moves_back_by_the_same_amount(sandbox):
    save_scraps(sandbox.engine, Dispatcher(), count=1, users=1)
    almost_a_second = datetime(2026, 12, 3, 15, 50, 30, 999778, tzinfo=UTC)
    with sandbox.engine.begin() as conn:
        conn.execute(update(scraps).values(created_at=almost_a_second))

    age_database(sandbox.engine, timedelta(hours=2, seconds=1))

    [moved] = [
        value
        for (table, _, column), value in timestamps(sandbox).items()
        if (table, column) == ("scraps", "created_at")
    ]
    assert moved == almost_a_second - timedelta(hours=2, seconds=1)


def test_time_travel_refuses_a_database_that_is_not_a_sandbox(san_db):
    user = san_db.user()
    scrap = san_db.scrap(user)
    before = san_db.count(scraps)
    with san_db.engine.connect() as conn:
        created = conn.execute(
            text("SELECT created_at FROM scraps WHERE id = :id"), {"id": scrap}
        ).scalar_one()
    with pytest.raises(NotASandbox, match="not a sandbox"):
        age_database(san_db.engine, timedelta(hours=2))
    with san_db.engine.connect() as conn:
        assert (
            conn.execute(
                text("SELECT created_at FROM scraps WHERE id = :id"), {"id": scrap}
            ).scalar_one()
            == created
        )
    assert before == 1


def test_time_travel_goes_back_only(sandbox):
    with pytest.raises(ValueError, match="back only"):
        age_database(sandbox.engine, timedelta(hours=-1))
