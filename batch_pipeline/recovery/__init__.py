"""The 2-hourly recovery (runRecovery()): every recovery of registry.py, in its order (the
design's ghost jobs, orphan scraps and unrefined scraps, then batch_pipeline's extensions).

Each recovery is one module holding its rule as SQL next to plain functions over a SQLAlchemy
connection (ghost_jobs.py, or a TargetRecovery declaration over targets.py); ops.py, assets.py,
jobs.py, schedules.py and definitions.py wire them into Dagster.
"""
