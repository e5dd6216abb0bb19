"""The ghost-job rule: PENDING > 30 min (the event was lost) or PROCESSING > 1 h (above the AI
server's call-timeout ceiling). One constant each, read by the detection, the close's
compare-and-set, the run config's defaults, the fast lane, `explain` and the metrics.

A PROCESSING job's age runs from `started_at`, or from `updated_at` when a worker never set
`started_at`.

No job is stale before it has existed for the shorter threshold (`created_before`): a job
cannot start before it is created, so the bound changes no verdict where clocks agree (a job
whose worker's clock stamped `started_at` before `created_at` is healed that much later). It
lets every read of the rule stop short of the recent end of the active-jobs index, where the
app's churn is: at hundreds of jobs a second, the dead index entries of the jobs it has just
finished, which a read without the bound walks until autovacuum has cleared them.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, func, or_
from sqlalchemy.sql.elements import ColumnElement

from batch_pipeline.san.tables import ACTIVE_STATUSES, PENDING, PROCESSING, jobs

AREA = "ghost_job_recovery"

# The design's thresholds: a worker takes a job right after its event, so 30 minutes in PENDING
# means the event was lost; 1 hour in PROCESSING is above the AI server's call-timeout ceiling.
STALE_PENDING_AFTER = timedelta(minutes=30)
STALE_PROCESSING_AFTER = timedelta(minutes=60)


@dataclass(frozen=True)
class GhostRule:
    """The rule as cut-off instants for one run."""

    now: datetime
    stale_pending_after: timedelta = STALE_PENDING_AFTER
    stale_processing_after: timedelta = STALE_PROCESSING_AFTER

    @property
    def pending_cutoff(self) -> datetime:
        return self.now - self.stale_pending_after

    @property
    def processing_cutoff(self) -> datetime:
        return self.now - self.stale_processing_after

    @property
    def shortest_stale_age(self) -> timedelta:
        """How long a job must have existed before either branch of the rule can hold."""
        return min(self.stale_pending_after, self.stale_processing_after)

    @property
    def created_before(self) -> datetime:
        return self.now - self.shortest_stale_age


def processing_since(table=jobs) -> ColumnElement:
    return func.coalesce(table.c.started_at, table.c.updated_at)


def is_stale(rule: GhostRule, table=jobs) -> ColumnElement:
    """PENDING created before the pending cut-off, or PROCESSING since before the processing one.

    Used both to detect and, again, inside the UPDATE that closes the job (compare-and-set): a
    job a worker took, finished or re-started in between no longer matches and is left alone.
    """
    return and_(
        table.c.status.in_(ACTIVE_STATUSES),  # lets PostgreSQL use the partial active-jobs index
        table.c.created_at < rule.created_before,  # a range of that index, without the app's churn
        or_(
            and_(table.c.status == PENDING, table.c.created_at < rule.pending_cutoff),
            and_(table.c.status == PROCESSING, processing_since(table) < rule.processing_cutoff),
        ),
    )


# How every ghost this recovery closes begins its error_message: with the closing instant, it
# tells a ghost this recovery closed from one a worker failed.
CLOSED_BY = "batch_pipeline ghost-job recovery"
