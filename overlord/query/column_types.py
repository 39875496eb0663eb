"""The types of datasource columns a Druid SQL translation needs.

Druid compares a VARCHAR column with a number as numbers (``dim1 = 10``: '10.1' does not match, 'abc'
matches nothing), a FLOAT column with a literal as FLOATs (``f1 = 0.1`` matches the stored 0.1f),
and a top-N over a number column in descending order puts its nulls first. Spark needs to know the
column's type to do the same, and the segment descriptors do not record it: it comes from the
footer of each queried datasource's newest segment file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pyarrow as pa

from overlord.query.segment_source import footer_schema
from segment_store.timeline import VisibleSet

__all__ = ["column_kinds", "table_columns"]

_KINDS = {pa.string(): "string", pa.large_string(): "string", pa.float32(): "float", pa.float64(): "double",
          pa.int64(): "long"}


def _file_kinds(path: str, storage_options: Mapping[str, Any] | None) -> dict[str, str]:
    """A segment file's text and number columns: lower-case name -> ``string``, ``float``, ``double``, ``long``."""
    return {field.name.lower(): _KINDS[field.type] for field in footer_schema(path, storage_options)
            if field.type in _KINDS}


def column_kinds(timeline: VisibleSet, names: Iterable[str], columns: Iterable[str],
                 storage_options: Mapping[str, Any] | None = None,
                 copy_of: Callable[[str], str | None] = lambda _path: None) -> dict[str, str]:
    """Of ``columns`` (lower case), those that are text or numbers in the datasources ``names``: name -> kind.

    ``copy_of`` names a local copy of a segment file (the segment cache's), read instead of the file if it exists.
    """
    wanted, kinds = set(columns), dict[str, str]()
    for name in names:
        datasource = timeline.resolve(name)
        segments = timeline.segments.get(datasource or "", [])
        if segments and wanted:
            newest = max(segments, key=lambda s: (s.interval_end, s.path))
            copy = copy_of(newest.path)
            try:
                found = _file_kinds(copy, None) if copy is not None else None
            except OSError:  # evicted meanwhile
                found = None
            found = found if found is not None else _file_kinds(newest.path, storage_options)
            kinds.update((c, k) for c, k in found.items() if c in wanted)
    return kinds


def table_columns(timeline: VisibleSet, names: Iterable[str], storage_options: Mapping[str, Any] | None = None
                  ) -> dict[str, tuple[str, ...]]:
    """The columns of each datasource of ``names`` (lower-case name -> its columns), those of all its files.

    In the newest file's order, then those only older files have; a name that is no datasource is left out.
    """
    columns: dict[str, tuple[str, ...]] = {}
    for name in names:
        segments = timeline.segments.get(timeline.resolve(name) or "", [])
        found: dict[str, None] = {}
        for segment in sorted(segments, key=lambda s: (s.interval_end, s.path), reverse=True):
            found.update(dict.fromkeys(footer_schema(segment.path, storage_options).names))
        if found:
            columns[name.lower()] = tuple(found)
    return columns
