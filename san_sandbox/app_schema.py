"""The SAN application's full tables, for sandbox databases only, and the guard that keeps the
sandbox away from real SAN data.

batch_pipeline itself declares only the columns it uses (san/schema.py). The sandbox plays the
app and its workers, so it writes the columns they write too (a card's title, summary and
embedding; a summary's content). The columns mirror `san_app_schema.sql`; a test compares them.

The sandbox shifts timestamps and deletes nothing, but it does rewrite every row's timestamps:
it must never touch a real SAN database. `init_sandbox` marks a database it may use (the table
`san_sandbox`) and refuses one that already holds SAN data; every other entry point calls
`require_sandbox` first.
"""

from pathlib import Path

from sqlalchemy import (
    JSON,
    REAL,
    Column,
    Date,
    DateTime,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    func,
    insert,
    inspect,
    or_,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.engine import Connection, Engine

from batch_pipeline.san.database import redacted, utc_now
from batch_pipeline.san.schema import create_recommended_indexes
from batch_pipeline.san.tables import Id, Timestamp

# The SAN application's own DDL on PostgreSQL, a copy of ../shared/san_app_schema.sql (a test
# keeps the two equal): what a real SAN database looks like, for tests and the benchmark.
APP_DDL = Path(__file__).with_name("san_app_schema.sql")

Embedding = ARRAY(REAL).with_variant(JSON(), "sqlite")
NOW = text("CURRENT_TIMESTAMP")  # the app's DEFAULT now(), on both databases

app_metadata = MetaData()

app_users = Table(
    "users",
    app_metadata,
    Column("id", Id, primary_key=True),
    Column("nickname", Text),
    Column("created_at", Timestamp, nullable=False, server_default=NOW),
)
app_scraps = Table(
    "scraps",
    app_metadata,
    Column("id", Id, primary_key=True),
    Column("user_id", Id, ForeignKey("users.id"), nullable=False),
    Column("source_url", Text),
    Column("original_content", Text, nullable=False),
    Column("refined_content", Text),
    Column("content_hash", Text),
    Column("created_at", Timestamp, nullable=False, server_default=NOW),
    Column("updated_at", Timestamp, nullable=False, server_default=NOW),
)
app_knowledge_cards = Table(
    "knowledge_cards",
    app_metadata,
    Column("id", Id, primary_key=True),
    Column("scrap_id", Id, ForeignKey("scraps.id"), nullable=False, unique=True),
    Column("user_id", Id, ForeignKey("users.id"), nullable=False),
    Column("title", Text),
    Column("summary", Text),
    Column("embedding", Embedding),
    Column("created_at", Timestamp, nullable=False, server_default=NOW),
)
app_jobs = Table(
    "jobs",
    app_metadata,
    Column("id", Id, primary_key=True),
    Column("job_type", String(32), nullable=False),
    Column("target_id", Id, nullable=False),
    Column("status", String(16), nullable=False),
    Column("created_at", Timestamp, nullable=False, server_default=NOW),
    Column("updated_at", Timestamp, nullable=False, server_default=NOW),
    Column("started_at", Timestamp),
    Column("finished_at", Timestamp),
    Column("error_message", Text),
    Column("retry_of_job_id", Id, ForeignKey("jobs.id")),
)
app_daily_summaries = Table(
    "daily_summaries",
    app_metadata,
    Column("id", Id, primary_key=True),
    Column("user_id", Id, ForeignKey("users.id"), nullable=False),
    Column("target_date", Date, nullable=False),
    Column("content", Text),
    Column("created_at", Timestamp, nullable=False, server_default=NOW),
)
# The mark of a sandbox database: one row, written by init_sandbox.
sandbox_marker = Table(
    "san_sandbox",
    app_metadata,
    Column("id", Integer, primary_key=True),
    Column("created_at", Timestamp, nullable=False, server_default=NOW),
)

SAN_TABLES = [app_users, app_scraps, app_knowledge_cards, app_jobs, app_daily_summaries]
# Every timestamp the sandbox's time travel shifts.
TIMESTAMP_COLUMNS = {
    table.name: [column.name for column in table.columns if isinstance(column.type, DateTime)]
    for table in SAN_TABLES
}


class NotASandbox(RuntimeError):
    """The database is not a sandbox: the sandbox refuses to write to it."""


def is_sandbox(conn: Connection) -> bool:
    if not inspect(conn).has_table(sandbox_marker.name):
        return False
    return conn.execute(select(func.count()).select_from(sandbox_marker)).scalar_one() > 0


# Every user the sandbox creates is named so. A user named otherwise is somebody else's (the
# app's real users arrived after `init` on an empty production database): the marker alone
# would not stop the sandbox from rewriting their timestamps or working their jobs.
SANDBOX_NICKNAME = "sandbox learner"


def foreign_user(conn: Connection) -> int | None:
    """The id of a user the sandbox did not create, if there is one."""
    nickname = app_users.c.nickname
    return conn.execute(
        select(app_users.c.id)
        .where(or_(nickname.is_(None), ~nickname.startswith(SANDBOX_NICKNAME, autoescape=True)))
        .limit(1)
    ).scalar()


def require_sandbox(engine: Engine) -> None:
    """Every entry point that writes calls this first: a sandbox database, holding no user the
    sandbox did not create."""
    with engine.connect() as conn:
        if not is_sandbox(conn):
            raise NotASandbox(
                f"{redacted(engine.url)} is not a sandbox database (no "
                "san_sandbox table): the sandbox rewrites timestamps and plays workers, so it only "
                "runs on a database made by `python -m san_sandbox init`"
            )
        stranger = foreign_user(conn)
        if stranger is not None:
            raise NotASandbox(
                f"{redacted(engine.url)} is marked as a sandbox but holds users the sandbox did "
                "not create "
                f"(user {stranger}): real users have arrived, so it is not a sandbox any more and "
                "the sandbox "
                "writes nothing to it"
            )


def init_sandbox(engine: Engine, recommended_indexes: bool = True) -> bool:
    """Create the SAN tables (as the app does) and mark the database as a sandbox.

    With `recommended_indexes` (the default) it also applies batch_pipeline's recommended
    indexes, as a production SAN database should have them: a sandbox grows from empty faster
    than autovacuum analyses it, and without them a stale row estimate can make the planner
    pick a nested loop over the whole jobs table for the scrap recoveries' anti-join.

    Refuses a database that already holds SAN rows and is not a sandbox. Returns True if the
    database was newly marked, False if it already was a sandbox.
    """
    with engine.begin() as conn:
        if is_sandbox(conn):
            return False
        existing = set(inspect(conn).get_table_names())
        for table in SAN_TABLES:
            if table.name in existing and conn.execute(select(table.c.id).limit(1)).first():
                raise NotASandbox(
                    f"refusing to turn {redacted(engine.url)} into a sandbox: "
                    f"table {table.name} already holds rows. Use an empty database."
                )
        app_metadata.create_all(conn)
        conn.execute(insert(sandbox_marker).values(id=1, created_at=utc_now()))
    if engine.dialect.name == "sqlite":
        # Workers, the load generator and Dagster write at once: WAL lets readers go on.
        raw = engine.raw_connection()  # outside SQLAlchemy's transaction (BEGIN IMMEDIATE)
        try:
            raw.driver_connection.execute("PRAGMA journal_mode=WAL")
        finally:
            raw.close()
    if recommended_indexes:
        create_recommended_indexes(engine)
    return True
