"""The daily TIL (runTilAutoGeneration()): for every user active on day D, a new DailySummary
and an enqueued TIL_GENERATION job. Partitioned by calendar day in SAN's time zone; the
schedule runs yesterday's partition at 03:00.

- auto_generation.py   the rule (active users of D) and the set-based creation, plain functions
- ops.py / jobs.py / schedules.py / partitions.py / assets.py   the Dagster wiring
"""
