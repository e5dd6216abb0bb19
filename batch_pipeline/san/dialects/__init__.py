"""SQL that differs by database, one module per dialect (as River keeps one query file per
driver): postgresql.py and sqlite.py offer the same functions. The rules (recovery/, til/) and
the enqueue path never branch on the dialect themselves; they ask `dialect(conn)`."""

from types import ModuleType

from sqlalchemy.engine import Connection, Engine

from batch_pipeline.san.dialects import postgresql, sqlite

DIALECTS = {postgresql.NAME: postgresql, sqlite.NAME: sqlite}


def dialect(bind: Connection | Engine) -> ModuleType:
    """The dialect module of a connection or engine."""
    return DIALECTS[bind.dialect.name]
