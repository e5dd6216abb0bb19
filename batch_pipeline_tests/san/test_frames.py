"""Frames built from query results: the declared dtypes and the stored values, on both dialects,
however SQLAlchemy fetches the rows."""

import pandas as pd
from sqlalchemy import select

from batch_pipeline.san.dialects import dialect
from batch_pipeline.san.frames import INT, UTC_DATETIME, FrameSchema
from batch_pipeline.san.tables import scraps

SCRAPS = FrameSchema(
    "Scraps", "scraps by id", {"id": INT, "user_id": INT, "created_at": UTC_DATETIME}
)
QUERY = select(scraps.c.id, scraps.c.user_id, scraps.c.created_at).order_by(scraps.c.id)


def test_a_frame_holds_the_stored_values_in_its_declared_dtypes(san_db):
    user = san_db.user()
    saved = [san_db.ago(hours=hours) for hours in (3, 2, 1)]
    ids = [san_db.scrap(user, created_at=at) for at in saved]
    with san_db.engine.connect() as conn:
        frame = SCRAPS.from_rows(conn.execute(QUERY))
    assert frame.dtypes.astype(str).to_dict() == {
        "id": "int64",
        "user_id": "int64",
        "created_at": "datetime64[ns, UTC]",
    }
    assert frame["id"].tolist() == ids and frame["user_id"].tolist() == [user] * 3
    assert frame["created_at"].tolist() == [pd.Timestamp(at) for at in saved]


def test_a_result_sqlalchemy_buffers_itself_still_gives_every_row(san_db):
    """A streamed result (server-side cursor, rows buffered by SQLAlchemy) is not read from the
    driver's cursor directly: rows SQLAlchemy already buffered would be lost."""
    user = san_db.user()
    ids = [san_db.scrap(user) for _ in range(7)]
    with san_db.engine.connect() as conn:
        result = conn.execution_options(yield_per=3).execute(QUERY)
        assert dialect(conn).plain_rows(result) == [tuple(row) for row in conn.execute(QUERY).all()]
        frame = SCRAPS.from_rows(conn.execution_options(yield_per=3).execute(QUERY))
    assert frame["id"].tolist() == ids
