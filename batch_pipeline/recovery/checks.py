"""Asset checks on the recovery assets, run after every recovery run (see sensors.py).

- ghost_backlog       no job stale for more than BACKLOG_FACTOR x its threshold: recovery keeps up (ERROR)
- exhausted_targets   targets that reached max_attempts since the previous run (WARN, with ids), per recovery
- deferred_backlog    work deferred by the per-run cap more than DEFERRED_RUNS_IN_A_ROW runs in a row (WARN), per recovery
- recovery_indexes    the recommended indexes exist on the SAN database (WARN, with the DDL)
- unknown_job_statuses  jobs whose status is none of PENDING/PROCESSING/COMPLETED/FAILED (WARN)
"""

from datetime import timedelta

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetKey,
    asset_check,
)
from sqlalchemy import func, select

from batch_pipeline.recovery import ghost_jobs
from batch_pipeline.recovery.plan import minutes
from batch_pipeline.recovery.registry import AREAS
from batch_pipeline.san.database import read_transaction, utc_now
from batch_pipeline.san.resources import SanDatabase
from batch_pipeline.san.schema import JOB_STATUSES, index_advice, jobs

# The backlog limit, as a multiple of the run's thresholds: a job stale for longer has been
# missed by at least one run (the period is 2 h, the thresholds 30 and 60 min).
BACKLOG_FACTOR = 2
DEFERRED_RUNS_IN_A_ROW = 3
ID_SAMPLE = 100


def recent_audits(context: AssetCheckExecutionContext, area: str, limit: int) -> list[dict]:
    """The metadata of the area's latest materializations, newest first."""
    records = context.instance.fetch_materializations(AssetKey(area), limit=limit).records
    return [{k: v.value for k, v in r.asset_materialization.metadata.items()} for r in records]


def backlog_rule(audit: dict | None) -> ghost_jobs.GhostRule:
    """BACKLOG_FACTOR x the thresholds the latest run used (the design's defaults before any run)."""
    used = (audit or {}).get("thresholds", {})
    pending = used.get("stale_pending_after_minutes", minutes(ghost_jobs.STALE_PENDING_AFTER))
    processing = used.get("stale_processing_after_minutes", minutes(ghost_jobs.STALE_PROCESSING_AFTER))
    return ghost_jobs.GhostRule(
        now=utc_now(),
        stale_pending_after=BACKLOG_FACTOR * timedelta(minutes=pending),
        stale_processing_after=BACKLOG_FACTOR * timedelta(minutes=processing),
    )


@asset_check(asset=ghost_jobs.AREA, name="ghost_backlog",
             description=f"No job has been stale for more than {BACKLOG_FACTOR} x its threshold ("
             f"{BACKLOG_FACTOR * minutes(ghost_jobs.STALE_PENDING_AFTER)} min PENDING, "
             f"{BACKLOG_FACTOR * minutes(ghost_jobs.STALE_PROCESSING_AFTER)} min PROCESSING by default).")
def ghost_backlog(context: AssetCheckExecutionContext, san_database: SanDatabase) -> AssetCheckResult:
    audits = recent_audits(context, ghost_jobs.AREA, 1)
    rule = backlog_rule(audits[0] if audits else None)
    with read_transaction(san_database.get_engine()) as conn:
        count = conn.execute(select(func.count()).select_from(jobs).where(ghost_jobs.is_stale(rule))).scalar_one()
        sample = conn.execute(select(jobs.c.id).where(ghost_jobs.is_stale(rule)).order_by(jobs.c.id).limit(ID_SAMPLE)).scalars().all()
    return AssetCheckResult(
        passed=count == 0,
        severity=AssetCheckSeverity.ERROR,
        description=None if count == 0 else f"{count} jobs stale for more than {BACKLOG_FACTOR} x the threshold: recovery is not keeping up",
        metadata={
            "stale_beyond_twice_threshold": count,
            "job_ids": sample,
            "pending_limit_minutes": rule.stale_pending_after.total_seconds() / 60,
            "processing_limit_minutes": rule.stale_processing_after.total_seconds() / 60,
        },
    )


def exhausted_targets_check(area: str):
    @asset_check(asset=area, name="exhausted_targets",
                 description="Targets that reached max_attempts since the previous run: poison scraps to look at.")
    def exhausted_targets(context: AssetCheckExecutionContext) -> AssetCheckResult:
        latest, *previous = recent_audits(context, area, 2) or [{}]
        before = set(previous[0].get("exhausted_ids", [])) if previous else set()
        new = [i for i in latest.get("exhausted_ids", []) if i not in before]
        return AssetCheckResult(
            passed=not new,
            severity=AssetCheckSeverity.WARN,
            description=None if not new else f"{len(new)} targets reached max_attempts and get no new job",
            metadata={"newly_exhausted": len(new), "exhausted_ids": new[:ID_SAMPLE]},
        )

    return exhausted_targets


def deferred_backlog_check(area: str):
    @asset_check(asset=area, name="deferred_backlog",
                 description=f"Work deferred by the per-run cap for more than {DEFERRED_RUNS_IN_A_ROW} runs in a row.")
    def deferred_backlog(context: AssetCheckExecutionContext) -> AssetCheckResult:
        audits = recent_audits(context, area, DEFERRED_RUNS_IN_A_ROW + 1)
        streak = 0
        for audit in audits:
            if not audit.get("deferred"):
                break
            streak += 1
        backlog = streak > DEFERRED_RUNS_IN_A_ROW
        return AssetCheckResult(
            passed=not backlog,
            severity=AssetCheckSeverity.WARN,
            description=None if not backlog else
            f"deferred for {streak} runs in a row: raise max_enqueue_per_run or run more often",
            metadata={"runs_in_a_row_with_deferred_work": streak, "deferred_last_run": audits[0].get("deferred", 0) if audits else 0},
        )

    return deferred_backlog


@asset_check(asset=ghost_jobs.AREA, name="recovery_indexes",
             description="The recommended indexes exist on the SAN database; otherwise detection scans whole tables.")
def recovery_indexes(san_database: SanDatabase) -> AssetCheckResult:
    with read_transaction(san_database.get_engine()) as conn:
        advice = index_advice(conn)
    problems = (["missing: " + ", ".join(ix.name for ix in advice.missing)] if advice.missing else []) + (
        ["superseded (drop once the replacement exists): " + ", ".join(advice.superseded)] if advice.superseded else []
    )
    return AssetCheckResult(
        passed=not problems,
        severity=AssetCheckSeverity.WARN,
        description=None if not problems else "; ".join(problems) + " (or run `python -m batch_pipeline create-indexes`)",
        metadata={"missing": [ix.name for ix in advice.missing], "create_with": ";\n".join(advice.create_with),
                  "superseded": advice.superseded, "drop_with": ";\n".join(advice.drop_with)},
    )


# A status batch_pipeline does not know (a new app state, a typo in a migration) is never
# touched: detection matches PENDING/PROCESSING only. This counts such rows so they are seen.
# It reads every job (no index can find "none of these values"): one sequential scan per run.
UNKNOWN_STATUSES = (
    select(jobs.c.status, func.count().label("jobs"), func.min(jobs.c.id).label("first_job_id"))
    .where(jobs.c.status.not_in(JOB_STATUSES))
    .group_by(jobs.c.status)
    .order_by(jobs.c.status)
)


@asset_check(asset=ghost_jobs.AREA, name="unknown_job_statuses",
             description="Jobs whose status is not one batch_pipeline knows; they are left alone and counted here.")
def unknown_job_statuses(san_database: SanDatabase) -> AssetCheckResult:
    with read_transaction(san_database.get_engine()) as conn:
        rows = conn.execute(UNKNOWN_STATUSES).all()
    total = sum(row.jobs for row in rows)
    return AssetCheckResult(
        passed=total == 0,
        severity=AssetCheckSeverity.WARN,
        description=None if not total else
        f"{total} jobs have a status batch_pipeline does not know ("
        + ", ".join(f"{row.status!r}: {row.jobs}" for row in rows)
        + "); recovery leaves them alone",
        metadata={"unknown_status_jobs": total,
                  "by_status": {str(row.status): {"jobs": row.jobs, "first_job_id": row.first_job_id} for row in rows}},
    )


recovery_checks = [
    ghost_backlog,
    recovery_indexes,
    unknown_job_statuses,
    *(exhausted_targets_check(area) for area in AREAS),
    *(deferred_backlog_check(area) for area in AREAS),
]
