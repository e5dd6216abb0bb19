"""Time travel: age a sandbox database, so a test need not wait 30 minutes for a ghost.

Every timestamp of every SAN row moves back by the same amount, in one transaction: ages and
orders stay consistent (a job created 5 min ago is 2 h 5 min old after `age(hours=2)`). A
summary's target_date is a calendar day, not an instant, and stays.
"""

from datetime import timedelta

from sqlalchemy import text
from sqlalchemy.engine import Engine

from san_sandbox.app_schema import TIMESTAMP_COLUMNS, require_sandbox


def shifted(dialect: str, column: str) -> str:
    if dialect == "postgresql":
        return f"{column} - make_interval(secs => :seconds)"
    # SQLite keeps 'YYYY-MM-DD HH:MM:SS.ffffff' text: shift the whole seconds, keep the fraction.
    # The fraction is cut before strftime sees it: SQLite keeps milliseconds, so it would round
    # .9995 s and above up into the next second.
    whole_seconds = f"substr({column}, 1, 19)"
    shifted_seconds = (
        f"strftime('%Y-%m-%d %H:%M:%S', {whole_seconds}, '-' || :seconds || ' seconds')"
    )
    return f"{shifted_seconds} || substr({column}, 20)"


def age_database(engine: Engine, by: timedelta) -> None:
    """Move every SAN timestamp back by `by` (a sandbox database only)."""
    require_sandbox(engine)
    seconds = int(by.total_seconds())
    if seconds < 0:
        raise ValueError("time travel goes back only: `by` must be positive")
    with engine.begin() as conn:
        for table, columns in TIMESTAMP_COLUMNS.items():
            assignments = ", ".join(
                f"{column} = {shifted(engine.dialect.name, column)}" for column in columns
            )
            conn.execute(text(f"UPDATE {table} SET {assignments}"), {"seconds": seconds})
