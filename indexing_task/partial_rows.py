"""Partial rollups brought to a schema's current columns before they merge, and their sketch columns made.

A schema changes as a task runs (discovered dimensions, multi-value ones, widened types), so rows
rolled up before a change are completed (:func:`with_every_dimension`) before they merge with later ones.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from indexing_task.arrow_queries import arrow_query, thread_database
from indexing_task.rollup_schema import SEGMENT_START, RollupSchema
from specs.sketch_aggregators import Sketch

__all__ = ["as_multi_value", "sketched", "widened", "with_every_dimension"]


def widened(column: pa.Array | pa.ChunkedArray, to: pa.DataType) -> pa.Array | pa.ChunkedArray:
    """A discovered column cast to a wider type.

    A double becomes the text Spark's cast gives it (``1.0E20``, see ``java_double``), so a
    column widened here (within a task, by compaction) reads as one a query widens.
    """
    if to == pa.string() and column.type == pa.float64():
        cursor = thread_database().cursor()
        try:
            cursor.register("doubles", pa.table({"v": column}))
            return arrow_query(cursor, "SELECT java_double(v) AS v FROM doubles").column("v")
        finally:
            cursor.close()
    return column.cast(to)


def as_multi_value(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A string column as a multi-value one: each value a one-element list (null stays null); lists as they are."""
    if pa.types.is_list(column.type):
        return column
    return pa.array([None if v is None else [v] for v in column.to_pylist()], type=pa.list_(pa.string()))


def with_every_dimension(rows: pa.Table, schema: RollupSchema) -> pa.Table:
    """``rows`` (with a segment start) in ``schema``'s column order.

    Dimensions discovered since are null, those that became multi-value since are lists, and
    those whose discovered type widened since are of the wider type.
    """
    types = schema.arrow_types
    for d in schema.dimensions:
        if d.name not in rows.column_names:
            rows = rows.append_column(d.name, pa.nulls(rows.num_rows, types[d.name]))
        elif d.multi_value:
            rows = rows.set_column(rows.column_names.index(d.name), d.name, as_multi_value(rows.column(d.name)))
        elif d.discovered and rows.schema.field(d.name).type != types[d.name]:
            rows = rows.set_column(rows.column_names.index(d.name), d.name, widened(rows.column(d.name),
                                                                                   types[d.name]))
    return rows.select([SEGMENT_START, *schema.output_columns])


def sketched(rows: pa.Table, schema: RollupSchema, make: Callable[[Sketch, pa.ChunkedArray], pa.Array]) -> pa.Table:
    """``rows`` with each sketch column's lists (of values, or of sketches) made into sketches."""
    for m in schema.metrics:
        if m.sketch is not None:
            rows = rows.set_column(rows.column_names.index(m.name), m.name, make(m.sketch, rows.column(m.name)))
    return rows
