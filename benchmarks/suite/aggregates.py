"""The same aggregates from every system, side by side: per (minute, dimensions) count, sum, min, max.

Each system's output is loaded into a DuckDB table with the columns
``minute_ms, <dimensions...>, cnt, vsum, vmin, vmax`` and re-aggregated per minute and
dimensions (our rows for one key may be split across files and splits), then compared
exactly, in both directions.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import duckdb
import sqlalchemy as sa

from benchmarks.suite.shapes import Shape
from segment_store import used_segments

__all__ = ["compare", "load_ours", "load_parquet", "load_sql"]


def _q(name: str) -> str:
    return '"' + name + '"'


def load_sql(con: duckdb.DuckDBPyConnection, name: str, source: str, shape: Shape) -> int:
    """Load ``source`` (a query with the canonical columns) into table ``name``, re-aggregated."""
    dims = ", ".join(_q(d) for d in shape.dimensions)
    con.execute(f"""CREATE OR REPLACE TABLE {name} AS
        SELECT minute_ms::BIGINT AS minute_ms, {dims}, sum(cnt)::BIGINT AS cnt, sum(vsum)::BIGINT AS vsum,
               min(vmin)::BIGINT AS vmin, max(vmax)::BIGINT AS vmax
        FROM ({source}) GROUP BY ALL""")
    return int(con.execute(f"SELECT count(*) FROM {name}").fetchall()[0][0])


def load_ours(con: duckdb.DuckDBPyConnection, name: str, engine: sa.Engine, datasource: str, shape: Shape) -> int:
    """Our published segments (``used`` rows only), read from their Parquet files."""
    paths = [s.path for s in used_segments(engine, datasource)]
    dims = ", ".join(_q(d) for d in shape.dimensions)
    source = (f"SELECT epoch_ms(__time) AS minute_ms, {dims}, count AS cnt, value_sum AS vsum, "
              f"value_min AS vmin, value_max AS vmax FROM read_parquet({paths!r})")
    return load_sql(con, name, source, shape)


def load_parquet(con: duckdb.DuckDBPyConnection, name: str, files: Sequence[Path | str], shape: Shape) -> int:
    """A peer's output already in the canonical columns."""
    return load_sql(con, name, f"SELECT * FROM read_parquet({[str(f) for f in files]!r})", shape)


def compare(con: duckdb.DuckDBPyConnection, ours: str, theirs: str) -> dict[str, int | bool]:
    """Rows only in ours, only in theirs (exact match on every key and aggregate)."""
    only_ours = con.execute(f"SELECT count(*) FROM (FROM {ours} EXCEPT ALL FROM {theirs})").fetchall()[0][0]
    only_theirs = con.execute(f"SELECT count(*) FROM (FROM {theirs} EXCEPT ALL FROM {ours})").fetchall()[0][0]
    rows = con.execute(f"SELECT count(*) FROM {ours}").fetchall()[0][0]
    return {"rows": int(rows), "only_ours": int(only_ours), "only_theirs": int(only_theirs),
            "equal": only_ours == 0 and only_theirs == 0}
