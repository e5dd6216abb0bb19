"""Asset checks on the recovery assets, evaluated inside every recovery_job run (not a second
run): each recover op yields its area's checks beside its materialization, and the last op
yields the database-wide ones.

- ghost_backlog         no job stale for more than BACKLOG_FACTOR x its threshold: recovery keeps up
  (ERROR)
- recovery_indexes      the recommended indexes exist on the SAN database (WARN, with the DDL)
- unknown_job_statuses  jobs whose status is none of PENDING/PROCESSING/COMPLETED/FAILED (WARN)
- exhausted_targets     per recovery: targets that reached max_attempts since the previous run
  (WARN, with ids)
- deferred_backlog      per recovery: work deferred by the per-run cap more than
  DEFERRED_RUNS_IN_A_ROW runs in a row (WARN)

The checks are plain functions of a report, earlier audits or a connection; ops.py runs them.
"""

from datetime import timedelta

from dagster import AssetCheckResult, AssetCheckSeverity, AssetCheckSpec, AssetKey, DagsterInstance
from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from batch_pipeline.recovery import ghost_jobs
from batch_pipeline.recovery.dead_runs import AUDIT_OF_RUN
from batch_pipeline.recovery.plan import RecoveryReport, minutes
from batch_pipeline.recovery.registry import RECOVERIES
from batch_pipeline.san.dialects import dialect
from batch_pipeline.san.schema import index_advice
from batch_pipeline.san.tables import JOB_STATUSES, jobs

# The backlog limit, as a multiple of the run's thresholds: a job stale for longer has been
# missed by at least one run (the period is 2 h, the thresholds 30 and 60 min).
BACKLOG_FACTOR = 2
DEFERRED_RUNS_IN_A_ROW = 3
ID_SAMPLE = 100

GHOST_BACKLOG = AssetCheckSpec(
    "ghost_backlog",
    asset=ghost_jobs.AREA,
    description=f"No job has been stale for more than {BACKLOG_FACTOR} x its threshold ("
    f"{BACKLOG_FACTOR * minutes(ghost_jobs.STALE_PENDING_AFTER)} min PENDING, "
    f"{BACKLOG_FACTOR * minutes(ghost_jobs.STALE_PROCESSING_AFTER)} min PROCESSING by default).",
)
RECOVERY_INDEXES = AssetCheckSpec(
    "recovery_indexes",
    asset=ghost_jobs.AREA,
    description="The recommended indexes exist on the SAN database; otherwise detection scans "
    "whole tables.",
)
UNKNOWN_JOB_STATUSES = AssetCheckSpec(
    "unknown_job_statuses",
    asset=ghost_jobs.AREA,
    description="Jobs whose status is not one batch_pipeline knows; they are left alone and "
    "counted here.",
)
DATABASE_CHECKS = (GHOST_BACKLOG, RECOVERY_INDEXES, UNKNOWN_JOB_STATUSES)


def area_checks(area: str) -> tuple[AssetCheckSpec, AssetCheckSpec]:
    """The two checks every recovery has: exhausted_targets and deferred_backlog."""
    return (
        AssetCheckSpec(
            "exhausted_targets",
            asset=area,
            description="Targets that reached max_attempts since the previous run: poison targets "
            "to look at.",
        ),
        AssetCheckSpec(
            "deferred_backlog",
            asset=area,
            description=f"Work deferred by the per-run cap for more than {DEFERRED_RUNS_IN_A_ROW} "
            "runs in a row.",
        ),
    )


RECOVERY_CHECKS = (
    *DATABASE_CHECKS,
    *(spec for recovery in RECOVERIES for spec in area_checks(recovery.area)),
)


def output_name(spec: AssetCheckSpec) -> str:
    """The graph output that carries a check's result (Dagster's naming for check outputs)."""
    return f"{spec.asset_key.to_python_identifier()}_{spec.name}"


def recent_audits(instance: DagsterInstance, area: str, limit: int) -> list[dict]:
    """The metadata of the area's latest runs' own materializations, newest first (not those a
    run recorded for a dead one: dead_runs.AUDIT_OF_RUN)."""
    records = instance.fetch_materializations(AssetKey(area), limit=2 * limit).records
    audits = [{k: v.value for k, v in r.asset_materialization.metadata.items()} for r in records]
    return [audit for audit in audits if AUDIT_OF_RUN not in audit][:limit]


# -- per recovery: from this run's report and the runs before it ------------------------------
def exhausted_targets(report: RecoveryReport, earlier: list[dict]) -> AssetCheckResult:
    before = set(earlier[0].get("exhausted_ids", [])) if earlier else set()
    new = [i for i in report.exhausted_ids if i not in before]
    return AssetCheckResult(
        asset_key=report.area,
        check_name="exhausted_targets",
        passed=not new,
        severity=AssetCheckSeverity.WARN,
        description=None
        if not new
        else f"{len(new)} targets reached max_attempts and get no new job",
        metadata={"newly_exhausted": len(new), "exhausted_ids": new[:ID_SAMPLE]},
    )


def deferred_backlog(report: RecoveryReport, earlier: list[dict]) -> AssetCheckResult:
    streak = 0
    for deferred in [report.deferred, *(audit.get("deferred") for audit in earlier)]:
        if not deferred:
            break
        streak += 1
    backlog = streak > DEFERRED_RUNS_IN_A_ROW
    return AssetCheckResult(
        asset_key=report.area,
        check_name="deferred_backlog",
        passed=not backlog,
        severity=AssetCheckSeverity.WARN,
        description=None
        if not backlog
        else f"deferred for {streak} runs in a row: raise max_enqueue_per_run or run more often",
        metadata={"runs_in_a_row_with_deferred_work": streak, "deferred_last_run": report.deferred},
    )


# -- database-wide: read at the end of the run ------------------------------------------------
def backlog_rule(rule: ghost_jobs.GhostRule) -> ghost_jobs.GhostRule:
    """BACKLOG_FACTOR x the thresholds this run used."""
    return ghost_jobs.GhostRule(
        now=rule.now,
        stale_pending_after=BACKLOG_FACTOR * rule.stale_pending_after,
        stale_processing_after=BACKLOG_FACTOR * rule.stale_processing_after,
    )


def ghost_backlog(conn: Connection, rule: ghost_jobs.GhostRule) -> AssetCheckResult:
    """Read through the partial index of active jobs, as ghost detection is; the sample is the
    oldest stale jobs (in the index's created_at order: ordering by id would walk the primary key
    over every job looking for them)."""
    limit = backlog_rule(rule)
    dialect(conn).avoid_full_scans(conn, ghost_jobs.GHOST_DETECTION_PREFERS)  # transaction-local
    count = conn.execute(
        select(func.count()).select_from(jobs).where(ghost_jobs.is_stale(limit))
    ).scalar_one()
    sample = (
        conn.execute(
            select(jobs.c.id)
            .where(ghost_jobs.is_stale(limit))
            .order_by(jobs.c.created_at, jobs.c.id)
            .limit(ID_SAMPLE)
        )
        .scalars()
        .all()
        if count
        else []
    )
    return AssetCheckResult(
        asset_key=ghost_jobs.AREA,
        check_name=GHOST_BACKLOG.name,
        passed=count == 0,
        severity=AssetCheckSeverity.ERROR,
        description=None
        if count == 0
        else f"{count} jobs stale for more than {BACKLOG_FACTOR} x the threshold: recovery is not "
        "keeping up",
        metadata={
            "stale_beyond_twice_threshold": count,
            "job_ids": list(sample),
            "pending_limit_minutes": limit.stale_pending_after / timedelta(minutes=1),
            "processing_limit_minutes": limit.stale_processing_after / timedelta(minutes=1),
        },
    )


def recovery_indexes(conn: Connection) -> AssetCheckResult:
    advice = index_advice(conn)
    problems = [
        f"{label}: {', '.join(names)}"
        for label, names in (
            ("missing", [ix.name for ix in advice.missing]),
            ("another index holds the name", list(advice.conflicting)),
            ("superseded (drop once the replacement exists)", advice.superseded),
        )
        if names
    ]
    return AssetCheckResult(
        asset_key=ghost_jobs.AREA,
        check_name=RECOVERY_INDEXES.name,
        passed=not problems,
        severity=AssetCheckSeverity.WARN,
        description=None
        if not problems
        else "; ".join(problems) + " (or run `python -m batch_pipeline create-indexes`)",
        metadata={
            "missing": [ix.name for ix in advice.missing],
            "create_with": ";\n".join(advice.create_with),
            "superseded": advice.superseded,
            "conflicting": advice.conflicting,
            "drop_with": ";\n".join(advice.drop_with),
        },
    )


# A status batch_pipeline does not know (a new app state, a typo in a migration) is never
# touched: ghost detection matches PENDING/PROCESSING only. This counts such rows so they are
# seen. With the recommended partial index ix_san_jobs_unknown_status (whose predicate is this
# query's) it reads only those rows; without it, every job.
UNKNOWN_STATUSES = (
    select(jobs.c.status, func.count().label("jobs"), func.min(jobs.c.id).label("first_job_id"))
    .where(jobs.c.status.not_in(JOB_STATUSES))
    .group_by(jobs.c.status)
    .order_by(jobs.c.status)
)


def unknown_job_statuses(conn: Connection) -> AssetCheckResult:
    rows = conn.execute(UNKNOWN_STATUSES).all()
    total = sum(row.jobs for row in rows)
    return AssetCheckResult(
        asset_key=ghost_jobs.AREA,
        check_name=UNKNOWN_JOB_STATUSES.name,
        passed=total == 0,
        severity=AssetCheckSeverity.WARN,
        description=None
        if not total
        else f"{total} jobs have a status batch_pipeline does not know ("
        + ", ".join(f"{row.status!r}: {row.jobs}" for row in rows)
        + "); recovery leaves them alone",
        metadata={
            "unknown_status_jobs": total,
            "by_status": {
                str(row.status): {"jobs": row.jobs, "first_job_id": row.first_job_id}
                for row in rows
            },
        },
    )


def database_checks(conn: Connection, rule: ghost_jobs.GhostRule) -> list[AssetCheckResult]:
    return [ghost_backlog(conn, rule), recovery_indexes(conn), unknown_job_statuses(conn)]
