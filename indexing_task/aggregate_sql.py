"""SQL grouping a parse's rows, or partial rollups, by (segment, time, dimensions) and aggregating the metrics."""

from __future__ import annotations

from indexing_task.field_sql import SQL_TYPES
from indexing_task.metric_sql import pair_order, sketch_inputs, wrapped_long
from indexing_task.rollup_schema import SEGMENT_START, TIME, Metric, RollupSchema
from indexing_task.sql_text import quote_identifier as _q

__all__ = ["aggregate_sql"]

_STATUS_KEYS = ("__status", "CASE WHEN __status = 1 THEN __i END AS __bad_i",
                "CASE WHEN __status = 1 THEN __reason END AS __reason")


def aggregate_sql(schema: RollupSchema, source: str, combine: bool, status: bool = False) -> str:
    """Group ``source`` by (segment, time, dimensions); with ``status``, also by the record's status.

    A record's status is 0 (good), 1 (bad: each keeps its batch index and reason) or 2 (thrown
    away: outside the time bounds), and ``__n`` counts the records of each output row, so one
    pass over a batch yields the rollup, the bad records and the counts. ``combine``: ``source``
    holds partial rollups, whose metrics combine.
    """
    keys = [SEGMENT_START, TIME, *(_q(d.name) for d in schema.dimensions)]
    if status:
        keys = [*_STATUS_KEYS, *keys]
    aggs = [_metric_sql(i, m, schema.rollup, combine) for i, m in enumerate(schema.metrics)]
    if status:
        aggs.append("count(*) AS __n" if schema.rollup else "1 AS __n")
    select = ", ".join(keys + aggs)
    if combine or schema.rollup:
        return f"SELECT {select} FROM {source} GROUP BY ALL"
    return f"SELECT {select} FROM {source}"


def _metric_sql(i: int, m: Metric, rollup: bool, combine: bool) -> str:
    """Metric ``i``'s aggregate over a group (its value per row without ``rollup``), as a named column."""
    matched = f"__mf{i}" if m.filter_json is not None and not combine else None  # a filtered aggregator's
    col = _q(m.name) if combine else f"__m{i}" if matched is None else f"CASE WHEN {matched} THEN __m{i} END"
    sql_type = SQL_TYPES[m.type]
    if m.kind == "count":
        one = "1" if matched is None else f"CASE WHEN {matched} THEN 1 ELSE 0 END"
        counted = "count(*)" if matched is None else f"sum({one})"
        expr = f"sum({_q(m.name)})" if combine else (counted if rollup else one)
        sql_type = "BIGINT"
    elif m.sketch is not None:  # lists of values (or sketches) for Python to sketch (or merge)
        return f"{sketch_inputs(col, m.sketch.family, rollup, combine)} AS {_q(m.name)}"
    elif m.kind in ("first", "last"):  # the pair of the earliest (latest) time and offset
        pick = "arg_min" if m.kind == "first" else "arg_max"
        pair = f"{pick}({col}, {pair_order(col)})" if rollup or combine else col
        return f"{pair} AS {_q(m.name)}"
    else:  # sum, min, max: NULLs are skipped, and a group with no value at all stays NULL
        expr = f"{m.kind}({col})" if (rollup or combine) else col
        if m.kind == "sum" and sql_type == "BIGINT":
            expr = wrapped_long(expr)
    return f"CAST({expr} AS {sql_type}) AS {_q(m.name)}"
