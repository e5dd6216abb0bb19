"""The 2-hourly recovery (runRecovery()): ghost jobs, then orphan scraps, then unrefined scraps.

- ghost_jobs.py        PENDING > 30 min / PROCESSING > 1 h -> FAILED + enqueue again
- orphan_scraps.py     no knowledge card + no active CARD_ANALYSIS -> enqueue(CARD_ANALYSIS)
- unrefined_scraps.py  refined_content IS NULL + no active SCRAP_REFINE -> enqueue(SCRAP_REFINE)

Each module holds its rule as SQL next to plain functions over a SQLAlchemy connection;
ops.py, jobs.py and schedules.py wire them into Dagster.
"""
