"""The column types of segments and how they widen: one rule for tasks, compaction and queries.

A column typed by schema discovery may hold longs in one segment and doubles or strings in
another; whoever combines segments (a task's splits, compaction, a query's view) takes the
least restrictive type of the ones it finds, Druid's rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

import pyarrow as pa

__all__ = ["ValueType", "arrow_type", "value_type", "wider_type", "widest_types"]

ValueType = Literal["string", "long", "float", "double"]

_WIDENING = ("long", "float", "double", "string")
"""Column types, each able to hold the ones before it (Druid's least restrictive type; discovery never
makes a float)."""


def wider_type(a: str, b: str) -> str:
    """The least restrictive of two types: long, then float (only ever listed), double, string."""
    if a == b:
        return a
    return a if _WIDENING.index(a) >= _WIDENING.index(b) else b


def widest_types(schemas: Iterable[Mapping[str, str]]) -> dict[str, str]:
    """Column name -> the least restrictive of its types in ``schemas``, in order of first appearance."""
    widest: dict[str, str] = {}
    for schema in schemas:
        for name, found in schema.items():
            widest[name] = wider_type(widest.get(name, found), found)
    return widest


def arrow_type(kind: str) -> pa.DataType:
    """The Arrow (and Parquet) type a column of type ``kind`` (long, float, double, string) is written as."""
    return {"string": pa.string(), "long": pa.int64(), "float": pa.float32(), "double": pa.float64()}[kind]


def value_type(arrow: pa.DataType) -> str | None:
    """The discovered type of a column written as ``arrow`` (None: not a discovered type)."""
    return {pa.string(): "string", pa.int64(): "long", pa.float64(): "double"}.get(arrow)
