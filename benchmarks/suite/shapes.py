"""Event shapes of Druid's Kafka indexing service benchmark, and a fast generator for them.

A shape is a number of low-cardinality string dimensions (10 to 100 values each) and of
high-cardinality ones (200k values each), plus a ``value`` metric aggregated with count,
longSum, longMin and longMax. Events cover one hour in time order (up to a second of
jitter, as records arrive in a real topic), so a streaming peer's 1-minute windows close
as the data goes by. Generation is vectorised (numpy draws, DuckDB string building):
16M events take seconds, not minutes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import duckdb
import numpy as np
import pyarrow as pa

__all__ = ["DRUID_SHAPES", "HIGH_CARDINALITY", "HOUR_MS", "START_MS", "Shape", "generate", "shape_by_name"]

START_MS = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp() * 1000)
HOUR_MS = 3_600_000
HIGH_CARDINALITY = 200_000


@dataclass(frozen=True)
class Shape:
    """``low`` dimensions with 10-100 values, ``high`` dimensions with 200k values."""

    name: str
    low: int
    high: int
    druid_per_task: int
    """events/s per task in Druid's Kafka indexing service blog post."""

    @property
    def dimensions(self) -> list[str]:
        return [f"low{i}" for i in range(self.low)] + [f"high{i}" for i in range(self.high)]

    @property
    def cardinalities(self) -> list[int]:
        return [10 + 10 * (i % 10) for i in range(self.low)] + [HIGH_CARDINALITY] * self.high


DRUID_SHAPES = (
    Shape("1 low", 1, 0, 160_000),
    Shape("1 high", 0, 1, 80_000),
    Shape("5 low", 5, 0, 70_000),
    Shape("5 low + 1 high", 5, 1, 60_000),
    Shape("10 low + 1 high", 10, 1, 50_000),
    Shape("10 low + 3 high", 10, 3, 40_000),
    Shape("30 low", 30, 0, 30_000),
    Shape("50 low", 50, 0, 25_000),
    Shape("50 high", 0, 50, 15_000),
)


def shape_by_name(name: str) -> Shape:
    for shape in DRUID_SHAPES:
        if shape.name == name:
            return shape
    raise KeyError(f"unknown shape {name!r}; known: {', '.join(s.name for s in DRUID_SHAPES)}")


def generate(shape: Shape, n: int, seed: int = 1, offset_ms: int = 0) -> list[bytes]:
    """``n`` JSON events of ``shape`` over one hour from ``START_MS + offset_ms``, in time order."""
    rng = np.random.default_rng(seed)
    ts = START_MS + offset_ms + (np.arange(n, dtype=np.int64) * HOUR_MS) // max(n, 1)
    ts += rng.integers(0, 1000, n)
    np.minimum(ts, START_MS + offset_ms + HOUR_MS - 1, out=ts)
    columns: dict[str, np.ndarray] = {"ts": ts}
    for name, card in zip(shape.dimensions, shape.cardinalities, strict=True):
        columns[name] = rng.integers(0, card, n, dtype=np.int32)
    columns["value"] = rng.integers(0, 1000, n, dtype=np.int32)
    parts = ["'{\"ts\":'", "ts"]
    for name in shape.dimensions:
        prefix = "v" if name.startswith("low") else "h"
        parts += [f"',\"{name}\":\"{prefix}'", name, "'\"'"]
    parts += ["',\"value\":'", "value", "'}'"]
    table = pa.table(columns)
    con = duckdb.connect(config={"threads": 2})
    con.execute("SET enable_progress_bar = false")
    try:
        con.register("events", table)
        out = con.sql(f"SELECT encode(concat({', '.join(parts)})) AS v FROM events").to_arrow_table()
    finally:
        con.close()
    return out.column(0).to_pylist()
