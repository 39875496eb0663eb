"""The types of datasource columns a Druid SQL translation needs.

Druid compares a VARCHAR column with a number as numbers (``dim1 = 10``: '10.1' does not match, 'abc'
matches nothing), a FLOAT column with a literal as FLOATs (``f1 = 0.1`` matches the stored 0.1f),
and a top-N over a number column in descending order puts its nulls first. Spark needs to know the
column's type to do the same, and the segment descriptors do not record it: it comes from the
footer of each queried datasource's newest segment file, read once (segment files never change).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.core import url_to_fs

from segment_store.timeline import VisibleSet

__all__ = ["column_kinds"]

_KINDS = {pa.string(): "string", pa.large_string(): "string", pa.float32(): "float", pa.float64(): "double",
          pa.int64(): "long"}
_CACHE_SIZE = 10_000
_by_path: dict[str, dict[str, str]] = {}


def _file_kinds(path: str, storage_options: Mapping[str, Any] | None) -> dict[str, str]:
    """A segment file's text and number columns: lower-case name -> ``string``, ``float``, ``double``, ``long``."""
    kinds = _by_path.get(path)
    if kinds is None:
        fs, file = url_to_fs(path, **dict(storage_options or {}))
        with fs.open(file, "rb") as f:
            schema = pq.read_schema(f)
        kinds = {field.name.lower(): _KINDS[field.type] for field in schema if field.type in _KINDS}
        if len(_by_path) >= _CACHE_SIZE:
            _by_path.clear()
        _by_path[path] = kinds
    return kinds


def column_kinds(timeline: VisibleSet, names: Iterable[str], columns: Iterable[str],
                 storage_options: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Of ``columns`` (lower case), those that are text or numbers in the datasources ``names``: name -> kind."""
    wanted, kinds = set(columns), dict[str, str]()
    for name in names:
        datasource = timeline.resolve(name)
        segments = timeline.segments.get(datasource or "", [])
        if segments and wanted:
            newest = max(segments, key=lambda s: (s.interval_end, s.path))
            kinds.update((c, k) for c, k in _file_kinds(newest.path, storage_options).items() if c in wanted)
    return kinds
