"""Helpers of the support tests: targets in the states an operator asks about."""

from datetime import timedelta

import pytest
from dagster import DagsterInstance
from sqlalchemy import update

from batch_pipeline.san.tables import CARD_ANALYSIS, FAILED, jobs
from batch_pipeline_tests.processes import ROOT


def failed_jobs(
    db,
    target_id,
    count,
    job_type=CARD_ANALYSIS,
    error="AI 500: model overloaded",
    last_failed_ago=timedelta(hours=3),
) -> list[int]:
    """`count` FAILED jobs of `job_type` for the target, a minute apart, the last one
    `last_failed_ago`, each retrying the one before; their ids, oldest first."""
    ids = []
    for n in range(count):
        ended = db.now - last_failed_ago - timedelta(minutes=count - 1 - n)
        job_id = db.job(
            job_type,
            target_id,
            FAILED,
            created_at=ended - timedelta(seconds=20),
            started_at=ended - timedelta(seconds=15),
            updated_at=ended,
        )
        with db.engine.begin() as conn:
            conn.execute(
                update(jobs)
                .where(jobs.c.id == job_id)
                .values(
                    error_message=error, finished_at=ended, retry_of_job_id=ids[-1] if ids else None
                )
            )
        ids.append(job_id)
    return ids


def exhausted_scrap(db, attempts=10, **failure) -> tuple[int, list[int]]:
    """A scrap with no card whose CARD_ANALYSIS failed `attempts` times: (its id, its jobs)."""
    scrap = db.scrap(db.user(), created_at=db.ago(days=1))
    return scrap, failed_jobs(db, scrap, attempts, **failure)


@pytest.fixture(params=["sqlite", "postgres"])
def dagster_instance(request, tmp_path):
    """A Dagster instance on disk: SQLite storage (dagster dev's), or PostgreSQL (production's,
    deploy/dagster.prod.yaml's storage section, in a database of its own)."""
    home = tmp_path / f"dagster_home_{request.param}"
    home.mkdir()
    if request.param == "postgres":
        request.getfixturevalue("dagster_pg_storage")  # sets the DAGSTER_PG_* variables
        prod = (ROOT / "deploy" / "dagster.prod.yaml").read_text()
        (home / "dagster.yaml").write_text(
            prod[prod.index("storage:") : prod.index("\n\n", prod.index("storage:"))] + "\n"
        )
    else:
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    instance = DagsterInstance.from_config(str(home))
    try:
        yield instance
    finally:
        instance.dispose()
