"""What one write batch asks the enqueue path for: a `JobSource`. Plain data (SQLAlchemy
tables and expressions), so the dialects can take it without importing the enqueue path."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlalchemy import Table
from sqlalchemy.sql.elements import ColumnElement


class EnqueueRequest(NamedTuple):
    """One job to enqueue. (A NamedTuple, as NewJob: a run builds tens of thousands.)"""

    target_id: int
    retry_of_job_id: int | None = None


@dataclass(frozen=True)
class Eligibility:
    """A write-time re-check: each target must still be a row of `table` matching `predicate`
    (e.g. a scrap still without a card). Targets that no longer match get no job."""

    table: Table
    predicate: ColumnElement


@dataclass(frozen=True)
class JobSource:
    """Where one batch's job requests come from: either `requests` (targets of `job_type` by
    id, re-checked with `eligibility`), or rows this batch writes first, whose RETURNING rows
    are the targets: `statement` (a data-modifying statement with RETURNING, e.g. the ghosts it
    closes) or `inserts` (a table and `insert_rows` arguments, e.g. the summaries it creates;
    each dialect builds the insert its own way).

    For rows: `returned` names their columns, which come back in `EnqueueOutcome.source_rows`;
    `job_type` is one job type for every row (else the rows' `job_type` column);
    `retry_of_column` names the job each new job retries; `closes_active_jobs` says the rows
    were active jobs in the statement's snapshot (the ghosts it closes); `creates_targets` says
    the targets are new, so no job exists for them yet.
    """

    job_type: str | None = None
    requests: Sequence[EnqueueRequest] = ()
    eligibility: Eligibility | None = None
    statement: Any = None
    inserts: tuple[Table, dict] | None = None
    returned: tuple[str, ...] = ()
    target_column: str = "target_id"
    retry_of_column: str | None = None
    closes_active_jobs: bool = False
    creates_targets: bool = False

    @property
    def from_rows(self) -> bool:
        return self.statement is not None or self.inserts is not None
