"""The SAN tables batch_pipeline reads and writes, as SQLAlchemy Core, and the app's job
vocabulary.

The SAN application owns these tables. batch_pipeline declares only the columns it uses: a real
SAN database has more columns and other tables, and that is fine. This module depends on
nothing of the project's: every other module may import it.
"""

from sqlalchemy import (
    BigInteger,
    Column,
    Date,
    DateTime,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)
from sqlalchemy.sql.elements import ColumnElement

# BIGINT identity on PostgreSQL; SQLite only auto-increments an INTEGER PRIMARY KEY.
Id = BigInteger().with_variant(Integer(), "sqlite")
# The largest id either holds (a signed 64-bit integer): a larger one is no id, refused before
# any query (PostgreSQL would answer NumericValueOutOfRange).
MAX_ID = 2**63 - 1
Timestamp = DateTime(timezone=True)

metadata = MetaData()

users = Table("users", metadata, Column("id", Id, primary_key=True))

scraps = Table(
    "scraps",
    metadata,
    Column("id", Id, primary_key=True),
    Column("user_id", Id, ForeignKey("users.id"), nullable=False),
    Column("original_content", Text, nullable=False),
    Column("refined_content", Text, nullable=True),
    Column("created_at", Timestamp, nullable=False),
    Column("updated_at", Timestamp, nullable=False),
)

knowledge_cards = Table(
    "knowledge_cards",
    metadata,
    Column("id", Id, primary_key=True),
    Column("scrap_id", Id, ForeignKey("scraps.id"), nullable=False, unique=True),
    Column("user_id", Id, ForeignKey("users.id"), nullable=False),
    Column("created_at", Timestamp, nullable=False),
)

jobs = Table(
    "jobs",
    metadata,
    Column("id", Id, primary_key=True),
    Column("job_type", String(32), nullable=False),
    Column("target_id", Id, nullable=False),
    Column("status", String(16), nullable=False),
    Column("created_at", Timestamp, nullable=False),
    Column("updated_at", Timestamp, nullable=False),
    Column("started_at", Timestamp, nullable=True),
    Column("finished_at", Timestamp, nullable=True),
    Column("error_message", Text, nullable=True),
    Column("retry_of_job_id", Id, ForeignKey("jobs.id"), nullable=True),
)

daily_summaries = Table(
    "daily_summaries",
    metadata,
    Column("id", Id, primary_key=True),
    Column("user_id", Id, ForeignKey("users.id"), nullable=False),
    Column("target_date", Date, nullable=False),
    Column("content", Text, nullable=True),
    Column("created_at", Timestamp, nullable=False),
)

# Job vocabulary of the SAN application.
CARD_ANALYSIS = "CARD_ANALYSIS"
SCRAP_REFINE = "SCRAP_REFINE"
TIL_GENERATION = "TIL_GENERATION"
JOB_TYPES = (CARD_ANALYSIS, SCRAP_REFINE, TIL_GENERATION)

PENDING = "PENDING"
PROCESSING = "PROCESSING"
COMPLETED = "COMPLETED"
FAILED = "FAILED"
ACTIVE_STATUSES = (PENDING, PROCESSING)  # what recovery closes as ghosts (and nothing else)
FINISHED_STATUSES = (COMPLETED, FAILED)
JOB_STATUSES = (PENDING, PROCESSING, COMPLETED, FAILED)


def holds_its_target(status) -> ColumnElement:
    """Whether a job still covers its (job_type, target_id) for the "no active job" tests: every
    status but COMPLETED and FAILED. A status the pipeline does not know (lower-case 'pending',
    a new app state) may be a live job: counting it as active never doubles one. Such jobs are
    still never touched (ghost detection matches PENDING / PROCESSING only); the
    unknown_job_statuses check names them."""
    return status.not_in(FINISHED_STATUSES)
