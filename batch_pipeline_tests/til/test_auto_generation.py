"""TIL auto-generation: active users of day D, one new summary + TIL_GENERATION job each."""

import math
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import text

from batch_pipeline.san.dispatch import Dispatcher
from batch_pipeline.san.indexes import SCRAPS_CREATED_AT_INDEX
from batch_pipeline.san.schema import create_recommended_indexes
from batch_pipeline.san.tables import PENDING, TIL_GENERATION
from batch_pipeline.til import auto_generation
from batch_pipeline.til.auto_generation import create_daily_tils, day_bounds, detect_users_of_day
from batch_pipeline_tests.conftest import DiesOnBatch
from batch_pipeline_tests.sweeps import chunks_of_each_sweep, small_chunks

SEOUL = ZoneInfo("Asia/Seoul")
D = date(2026, 11, 28)


def at(day, hour, minute=0, second=0, micro=0, zone=SEOUL):
    return datetime(
        day.year, day.month, day.day, hour, minute, second, micro, tzinfo=zone
    ).astimezone(UTC)


def users_of(db, day=D, zone="Asia/Seoul"):
    with db.engine.connect() as conn:
        return detect_users_of_day(conn, *day_bounds(day, zone))


def create(
    db,
    users,
    day=D,
    zone="Asia/Seoul",
    summaries_created_at=None,
    dispatcher=None,
    batch_size=1000,
    dry_run=False,
):
    return create_daily_tils(
        db.engine,
        dispatcher or Dispatcher(),
        users,
        day=day,
        bounds=day_bounds(day, zone),
        summaries_created_at=summaries_created_at or db.now,
        now=db.now,
        batch_size=batch_size,
        dry_run=dry_run,
    )


def test_day_bounds_are_midnight_to_midnight_in_the_zone():
    assert day_bounds(D, "Asia/Seoul") == (
        datetime(2026, 11, 27, 15, tzinfo=UTC),
        datetime(2026, 11, 28, 15, tzinfo=UTC),
    )
    # New York's spring-forward day lasts 23 hours
    start, end = day_bounds(date(2026, 3, 8), "America/New_York")
    assert (start, end - start) == (
        datetime(2026, 3, 8, 5, tzinfo=UTC),
        timedelta(hours=23),
    )


def test_day_bounds_is_the_til_partition_window_on_ordinary_and_dst_days(monkeypatch):
    monkeypatch.setenv("SAN_TIL_FIRST_DAY", "2026-01-01")  # the spring DST days are partitions
    # The TIL job is partitioned by Dagster; its op and check use day_bounds: the two must agree.
    from batch_pipeline.til.partitions import til_partitions

    for zone in ("Asia/Seoul", "America/New_York", "Europe/Berlin"):
        partitions = til_partitions(zone)
        for day in (D, date(2026, 3, 8), date(2026, 3, 29), date(2026, 11, 1), date(2026, 10, 25)):
            window = partitions.time_window_for_partition_key(day.isoformat())
            assert day_bounds(day, zone) == (window.start, window.end), (zone, day)


def test_the_day_includes_its_first_and_last_second_and_nothing_either_side(san_db):
    first, last, before, after = (san_db.user() for _ in range(4))
    san_db.scrap(first, created_at=at(D, 0, 0, 0), card=True)
    san_db.scrap(last, created_at=at(D, 23, 59, 59), card=True)
    san_db.scrap(before, created_at=at(D, 0) - timedelta(microseconds=1), card=True)
    san_db.scrap(after, created_at=at(D + timedelta(days=1), 0), card=True)
    assert users_of(san_db)["user_id"].tolist() == [first, last]


def test_active_users_get_one_summary_and_one_job_each(san_db):
    busy, idle, waiting = san_db.user(), san_db.user(), san_db.user()
    for hour in (9, 12, 18):
        san_db.scrap(busy, created_at=at(D, hour), card=True)
    san_db.scrap(waiting, created_at=at(D, 10), card=False)  # no card yet: reported, not included
    san_db.scrap(idle, created_at=at(D, 10) - timedelta(days=2), card=True)
    users = users_of(san_db)
    assert users.set_index("user_id").loc[busy].tolist() == [3, 3]

    report = create(san_db, users)
    assert (
        report.active_users,
        report.summaries_created,
        report.jobs_created,
        report.users_waiting_for_cards,
    ) == (1, 1, 1, 1)
    [summary] = san_db.summaries()
    assert (summary.user_id, summary.target_date, summary.content) == (busy, D, None)
    [job] = san_db.jobs()
    assert (job.job_type, job.target_id, job.status) == (TIL_GENERATION, summary.id, PENDING)
    assert report.summary_ids == [summary.id] and report.job_ids == [job.id]


def test_a_card_made_after_midnight_counts_for_the_scrap_day(san_db):
    user = san_db.user()
    scrap = san_db.scrap(user, created_at=at(D, 23, 59))
    san_db.card(scrap, user, created_at=at(D + timedelta(days=1), 0, 40))
    assert create(san_db, users_of(san_db)).summaries_created == 1


def test_a_user_who_already_has_a_til_for_the_day_gets_another(san_db):
    user = san_db.user()
    san_db.scrap(user, created_at=at(D, 9), card=True)
    create(san_db, users_of(san_db), summaries_created_at=san_db.now - timedelta(hours=1))
    create(san_db, users_of(san_db), summaries_created_at=san_db.now)
    assert [s.user_id for s in san_db.summaries()] == [user, user]


def test_a_retried_run_does_not_give_anyone_a_second_summary(san_db):
    users = [san_db.user() for _ in range(5)]
    for user in users:
        san_db.scrap(user, created_at=at(D, 12), card=True)
    started = san_db.now
    with pytest.raises(RuntimeError):
        create(
            san_db,
            users_of(san_db),
            summaries_created_at=started,
            dispatcher=DiesOnBatch(2),
            batch_size=2,
        )
    assert len(san_db.summaries()) == 2  # batch 1 committed whole, batch 2 rolled back
    assert len(san_db.jobs()) == 2

    retry = create(san_db, users_of(san_db), summaries_created_at=started, batch_size=2)
    # the report covers both attempts: the 2 summaries of the failed one, the retry's 3
    assert (retry.already_done_in_run, retry.summaries_created, retry.jobs_created) == (2, 5, 5)
    assert sorted(retry.summary_ids) == [s.id for s in san_db.summaries()]
    assert sorted(s.user_id for s in san_db.summaries()) == users
    assert sorted(j.target_id for j in san_db.jobs()) == [s.id for s in san_db.summaries()]


def test_dry_run_writes_nothing(san_db):
    user = san_db.user()
    san_db.scrap(user, created_at=at(D, 12), card=True)
    report = create(san_db, users_of(san_db), dry_run=True)
    assert report.active_users == 1 and report.summaries_created == 0
    assert san_db.summaries() == [] and san_db.jobs() == []


def test_the_audit_lists_ids_up_to_the_limit_and_says_how_to_find_them_all(san_db, monkeypatch):
    monkeypatch.setattr("batch_pipeline.san.audit.AUDIT_ID_LIMIT", 2)
    users = [san_db.user() for _ in range(3)]
    for user in users:
        san_db.scrap(user, created_at=at(D, 12), card=True)
    started = san_db.now - timedelta(seconds=1)
    meta = create(san_db, users_of(san_db), summaries_created_at=started).metadata()

    assert meta["summaries_created"] == 3 and meta["ids_truncated"] is True
    summaries = san_db.summaries()
    assert meta["summary_ids"] == [s.id for s in summaries][:2] and len(meta["job_ids"]) == 2
    # the complete list: this run's summaries of D carry its start instant
    instant = datetime.fromisoformat(meta["summaries_created_at"])

    def utc(moment):  # SQLite gives naive UTC
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)

    assert [s.id for s in summaries if s.target_date == D and utc(s.created_at) == instant] == [
        s.id for s in summaries
    ]


def test_a_user_deleted_between_detection_and_write_is_skipped_and_reported(san_db):
    from sqlalchemy import text

    stays, leaves = san_db.user(), san_db.user()
    for user in (stays, leaves):
        san_db.scrap(user, created_at=at(D, 9), card=True)
    users = users_of(san_db)
    # the app deletes an account (its rows first: the foreign keys)
    with san_db.engine.begin() as conn:
        conn.execute(text("DELETE FROM knowledge_cards WHERE user_id = :u"), {"u": leaves})
        conn.execute(text("DELETE FROM scraps WHERE user_id = :u"), {"u": leaves})
        conn.execute(text("DELETE FROM users WHERE id = :u"), {"u": leaves})
    report = create(san_db, users)
    assert (report.summaries_created, report.users_gone) == (1, [leaves])
    assert [summary.user_id for summary in san_db.summaries()] == [stays]
    assert report.metadata()["users_gone"] == 1 and report.metadata()["users_gone_ids"] == [leaves]


def test_the_day_s_users_read_in_chunks_are_what_one_grouped_statement_finds(san_db, monkeypatch):
    """In chunks of 3 scraps (several on one instant: the chunks' keyset breaks the tie by id),
    and without the created_at index in one statement: the same users and counts."""
    small_chunks(monkeypatch, 3)
    chunked = chunks_of_each_sweep(monkeypatch, auto_generation, "swept_after")
    users = [san_db.user() for _ in range(3)]
    for number in range(17):
        instant = at(D, 9) if number < 6 else at(D, 10, number)
        san_db.scrap(users[number % 3], created_at=instant, card=number % 2 == 0)
    san_db.scrap(users[0], created_at=at(D, 0) - timedelta(microseconds=1), card=True)
    san_db.scrap(users[1], created_at=at(D + timedelta(days=1), 0), card=True)
    expected = [
        {"user_id": user, "scrap_count": count, "card_count": cards}
        for user, count, cards in [(users[0], 6, 3), (users[1], 6, 3), (users[2], 5, 3)]
    ]
    create_recommended_indexes(san_db.engine)
    assert users_of(san_db).to_dict("records") == expected
    assert chunked == [math.ceil(17 / 3) + (17 % 3 == 0)]  # the last chunk is the short one
    with san_db.engine.begin() as conn:
        conn.execute(text(f"DROP INDEX {SCRAPS_CREATED_AT_INDEX}"))
    assert users_of(san_db).to_dict("records") == expected
    assert len(chunked) == 1  # without the index: one statement, not a scan per chunk
