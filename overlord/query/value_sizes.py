"""How big a datasource column's values really are, from its segment files' footers.

The sandbox bounds a datasource column's variable-width value by
:data:`~overlord.query.function_bounds.COLUMN_SIZE` (1 MiB) whatever it holds, so ``CONCAT(tags,
'-', tags)`` over a multi-value column, selected as Druid writes it (``to_json``), may look past the
query's value limit over three-letter values. A Parquet column chunk records the size of all its
pages uncompressed (the dictionary page included, headers too): no value of the chunk is larger.
A list's elements are at most the chunk's value count, each counted with 8 more (the sandbox's
slot per element). Only text and binary leaves are sized so: a number column's value grows when
cast to text, and keeps the default bound. The sandbox takes the smaller of this and ``COLUMN_SIZE``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow.parquet as pq
from fsspec.core import url_to_fs

__all__ = ["MAX_FILES", "row_count", "value_sizes"]

MAX_FILES = 1_000
"""Datasources of more files than this keep the default bound (their footers are not all read for a query)."""

_CACHE_SIZE = 100_000
_sizes: dict[str, dict[str, int | None]] = {}
_rows: dict[str, int] = {}


def _file_sizes(path: str, storage_options: Mapping[str, Any] | None) -> dict[str, int | None]:
    """A segment file's bound per top-level column (lower case); None for a column with a leaf not text."""
    sizes = _sizes.get(path)
    if sizes is not None:
        return sizes
    fs, file = url_to_fs(path, **dict(storage_options or {}))
    with fs.open(file, "rb") as f:
        metadata = pq.read_metadata(f)
    sizes = {}
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        in_group: dict[str, int | None] = {}
        for index in range(row_group.num_columns):
            chunk = row_group.column(index)
            name = chunk.path_in_schema.split(".", 1)[0].lower()
            size = chunk.total_uncompressed_size + 8 * chunk.num_values  # (a text file's value may become a list)
            text = chunk.physical_type == "BYTE_ARRAY"
            so_far = in_group.get(name, 0)
            in_group[name] = None if not text or so_far is None else so_far + size
        for name, size in in_group.items():
            known = sizes.get(name, 0)
            sizes[name] = None if size is None or known is None else max(known, size)
    if len(_sizes) >= _CACHE_SIZE:
        _sizes.clear()
        _rows.clear()
    _sizes[path] = sizes
    _rows[path] = metadata.num_rows
    return sizes


def value_sizes(paths: Iterable[str], storage_options: Mapping[str, Any] | None = None) -> dict[str, int]:
    """An upper bound of one row's value of each text (or list of text) column of the files ``paths``.

    By lower-case column name; a column with a value that is not text in some file is left out, and so
    is every column when there are more than :data:`MAX_FILES` files.
    """
    files = list(paths)
    if len(files) > MAX_FILES:
        return {}
    bounds: dict[str, int | None] = {}
    for path in files:
        for name, size in _file_sizes(path, storage_options).items():
            known = bounds.get(name, 0)
            bounds[name] = None if size is None or known is None else max(known, size)
    return {name: size for name, size in bounds.items() if size is not None}


def row_count(paths: Iterable[str], storage_options: Mapping[str, Any] | None = None) -> int | None:
    """How many rows the files ``paths`` hold (their footers'); None for more than :data:`MAX_FILES` files."""
    files = list(paths)
    if len(files) > MAX_FILES:
        return None
    total = 0
    for path in files:
        if path not in _rows:
            _sizes.pop(path, None)
            _file_sizes(path, storage_options)
        total += _rows[path]
    return total
