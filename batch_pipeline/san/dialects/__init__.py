"""SQL that differs by database, one module per dialect (as River keeps one query file per
driver): postgresql.py and sqlite.py, each providing the `Dialect` interface (interface.py). The
rules (recovery/, til/, fast_lane/), the enqueue path and the commands never branch on the
database themselves; they ask `dialect(bind)`."""

from typing import cast

from sqlalchemy.engine import Connection, Engine, Result

from batch_pipeline.san.dialects import postgresql, sqlite
from batch_pipeline.san.dialects.interface import Dialect

DIALECTS: dict[str, Dialect] = {
    postgresql.NAME: cast(Dialect, postgresql),
    sqlite.NAME: cast(Dialect, sqlite),
}
# URL backend names -> dialect (postgres:// is PostgreSQL by its old name)
BY_URL_BACKEND = {backend: sql for sql in DIALECTS.values() for backend in sql.URL_BACKENDS}


def dialect(bind: Connection | Engine) -> Dialect:
    """The dialect module of a connection or engine."""
    return DIALECTS[bind.dialect.name]


class ColumnMismatch(RuntimeError):
    """A query returned other columns than the code decodes: a bug, named before a value is
    read into the wrong place."""


def named_rows(result: Result, names: tuple[str, ...]) -> list[tuple]:
    """Every row of `result` as a plain tuple (the dialect's fastest fetch), once its columns are
    checked to be `names`, in that order: the code then reads each row by position knowing what
    each position is. One check per result, not per row."""
    keys = tuple(result.keys())
    if keys != tuple(names):
        result.close()
        raise ColumnMismatch(
            f"the query returned the columns {keys}, the code reads {tuple(names)}"
        )
    return dialect(result.context.root_connection).plain_rows(result)
