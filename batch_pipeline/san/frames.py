"""Typed pandas DataFrames that Dagster checks between ops (declared columns and dtypes)."""

import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import pandas as pd
from dagster import BetaWarning, DagsterType
from dagster_pandas import PandasColumn, create_dagster_pandas_dataframe_type
from sqlalchemy import case, literal
from sqlalchemy.engine import Result
from sqlalchemy.sql.elements import ColumnElement

from batch_pipeline.san.dialects import named_rows
from batch_pipeline.san.tables import Timestamp

# The instants a frame's datetime64[ns] column can hold. SAN's rows hold others (a worker's zero
# time, year 1; '-infinity'; 1500-01-01) that SQL judges fine but pandas cannot represent.
FRAME_MIN = datetime(1678, 1, 1, tzinfo=UTC)
FRAME_MAX = datetime(2262, 1, 1, tzinfo=UTC)

INT = "int64"
TEXT = "object"
UTC_DATETIME = "datetime64[ns, UTC]"

_COLUMN_CHECKS = {
    INT: lambda name: PandasColumn.integer_column(name, non_nullable=True),
    TEXT: lambda name: PandasColumn.string_column(name, non_nullable=True),
    UTC_DATETIME: lambda name: PandasColumn.datetime_column(name, non_nullable=True, tz="UTC"),
}


def frame_instant(column: ColumnElement) -> ColumnElement:
    """`column` as a detection selects it into a frame: clamped to what a frame can hold, so one
    row with an out-of-range timestamp cannot stop detection (the row is judged by SQL on its
    real value; only the copy in the frame is clamped)."""
    low, high = literal(FRAME_MIN, Timestamp), literal(FRAME_MAX, Timestamp)
    return case((column < low, low), (column > high, high), else_=column)


@dataclass(frozen=True)
class FrameSchema:
    """A DataFrame's declared columns, the Dagster type that checks them, and a builder."""

    name: str
    description: str
    columns: Mapping[str, str]

    def dagster_type(self) -> DagsterType:
        # dagster-pandas marks these constructors beta; they are stable in the pinned release.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", BetaWarning)
            return create_dagster_pandas_dataframe_type(
                name=self.name,
                description=self.description,
                columns=[_COLUMN_CHECKS[dtype](column) for column, dtype in self.columns.items()],
            )

    def from_rows(self, rows: Iterable) -> pd.DataFrame:
        """Build a frame of exactly the declared columns and dtypes (also when empty), from a
        query result whose columns are the declared ones, by name and in order (checked once), or
        from rows of tuples in that order.

        Database timestamps arrive aware (PostgreSQL) or naive UTC (SQLite); both become UTC.
        """
        # One fetch of plain tuples, then one typed column at a time: no per-row Row objects
        # and no dtype inference over Python objects (docs/benchmarks.md, "Figures behind the
        # code").
        rows = named_rows(rows, tuple(self.columns)) if isinstance(rows, Result) else list(rows)
        values = list(zip(*rows, strict=True)) if rows else [()] * len(self.columns)
        return pd.DataFrame(
            {
                column: _column(column_values, dtype)
                for (column, dtype), column_values in zip(self.columns.items(), values, strict=True)
            }
        )


def _column(values, dtype: str) -> pd.Series:
    if dtype == UTC_DATETIME:
        return pd.Series(pd.to_datetime(list(values), utc=True), dtype=UTC_DATETIME)
    return pd.Series(list(values), dtype=dtype)
