"""Build and merge the sketch columns of rolled-up rows with Apache DataSketches.

The rollup's SQL hands each row's inputs over as a list (the distinct values for theta and HLL,
whose sketches ignore repeats; every value for KLL), or a list of serialized sketches when rows
merge. Sketches are serialized in DataSketches' compact binary form, which Spark's sketch
functions read. Values are hashed as text: ``12`` and ``"12"`` are one value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import datasketches as ds
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from specs.sketch_aggregators import Sketch

__all__ = ["build_sketches", "merge_sketches"]

_HLL_TYPES = {"HLL_4": ds.tgt_hll_type.HLL_4, "HLL_6": ds.tgt_hll_type.HLL_6, "HLL_8": ds.tgt_hll_type.HLL_8}


_EMPTY = "\x00"
"""The value '' is counted as where a sketch counts it (DataSketches skips the empty string)."""


def _builder(sketch: Sketch) -> Callable[[list[Any]], bytes]:
    family, size, hll_type, counts_empty = sketch
    if family == "theta":
        def theta(values: list[Any]) -> bytes:
            built = ds.update_theta_sketch(sketch.lg_size)
            for value in values:
                built.update(value)
            return bytes(built.compact().serialize())
        return theta
    if family == "hll":
        def hll(values: list[Any]) -> bytes:
            built = ds.hll_sketch(size, _HLL_TYPES[hll_type])
            for value in values:
                built.update(_EMPTY if counts_empty and value == "" else value)
            return bytes(built.serialize_compact())
        return hll

    def kll(values: list[Any]) -> bytes:
        built = ds.kll_doubles_sketch(size)
        if values:
            built.update(np.asarray(values, dtype=np.float64))
        return bytes(built.serialize())
    return kll


def _merger(sketch: Sketch) -> Callable[[list[bytes]], bytes]:
    family, size, hll_type, _ = sketch
    if family == "theta":
        def theta(parts: list[bytes]) -> bytes:
            union = ds.theta_union(sketch.lg_size)
            for part in parts:
                union.update(ds.compact_theta_sketch.deserialize(part))
            return bytes(union.get_result().serialize())
        return theta
    if family == "hll":
        def hll(parts: list[bytes]) -> bytes:
            union = ds.hll_union(size)
            for part in parts:
                union.update(ds.hll_sketch.deserialize(part))
            return bytes(union.get_result(_HLL_TYPES[hll_type]).serialize_compact())
        return hll

    def kll(parts: list[bytes]) -> bytes:
        merged = ds.kll_doubles_sketch(size)
        for part in parts:
            merged.merge(ds.kll_doubles_sketch.deserialize(part))
        return bytes(merged.serialize())
    return kll


def _rows(lists: pa.Array | pa.ChunkedArray) -> Iterator[list[Any]]:
    """The Python values of each row of a list array (a null row: none), converted in one go, not per row."""
    lists = lists.combine_chunks() if isinstance(lists, pa.ChunkedArray) else lists
    values = pc.list_flatten(lists).to_pylist()
    ends = np.cumsum(pc.list_value_length(lists).fill_null(0).to_numpy(zero_copy_only=False)).tolist()
    return (values[start:end] for start, end in zip([0, *ends], ends, strict=False))


def build_sketches(sketch: Sketch, inputs: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One serialized sketch per row of ``inputs``, a list of the row's values (null: no value)."""
    build = _builder(sketch)
    return pa.array([build(values) for values in _rows(inputs)], type=pa.binary())


def merge_sketches(sketch: Sketch, parts: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One serialized sketch per row of ``parts``, a list of serialized sketches to merge.

    NULLs (rows from before the metric existed) are left out; a row of only NULLs stays NULL, as in Druid.
    """
    merge = _merger(sketch)

    def merged(row: list[bytes | None]) -> bytes | None:
        found = [part for part in row if part is not None]
        if len(found) < 2:  # one sketch (most rows of high-cardinality dimensions) is that sketch; none is NULL
            return found[0] if found else None
        return merge(found)
    return pa.array([merged(row) for row in _rows(parts)], type=pa.binary())
