"""A trickle's batch parsed with less planning: the same answers as the full parse query, record for record.

A batch whose JSON text holds no ``[`` is parsed by a query without the array reads and checks, and
its segment intervals are found without a query; both must answer exactly as before (the rows, their
order and types, every bad record's reason, the records thrown away).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from indexing_task.arrow_queries import arrow_query
from indexing_task.buckets import bucket_end_sql
from indexing_task.rollup import Rollup
from indexing_task.rollup_schema import RollupSchema
from specs import load_example
from tests.test_rollup import spec_schema

TRICKY: list[bytes | None] = [
    *(json.dumps(r, ensure_ascii=a).encode() for a in (True, False) for r in [
        {"time": "2026-11-01T12:00:00Z", "channel": "#en", "page": "Zürich 😀", "user": None, "added": 3},
        {"time": "2026-11-01T23:59:59.999Z", "channel": "(", "user": "a]", "comment": "ÿa", "delta": -0.0},
        {"time": "2026-11-02T00:00:00Z", "channel": "", "isRobot": True, "metroCode": 12, "added": "7"},
        {"time": 1793491200000, "cityName": {"a": 1}, "countryName": 1.5e300, "deleted": 2.9},
        {"time": "2026-12-31T10:00:00+02:00", "regionName": "é", "added": "x"},  # wrong type
        {"time": "not a time", "page": "p"},
        {"page": "no time"},
        {"time": "2024-02-29T00:00:00Z", "namespace": "late"},  # before min_time: thrown away
        {"time": "2026-11-01T12:00:00Z", "isNew": False, "isMinor": 0, "isAnonymous": "false"},
    ]),
    b'{"time": "2026-11-01T12:00:00Z", "channel": "\\u005b1, 2]", "page": "\\u005b"}',  # a '[' escaped
    b'{"time": "2026-11-01T12:00:00Z", "page": ', b"not json", b"17", None, "\xff".encode("latin-1")]


def _classified(rollup: Rollup, values: list[bytes | None], arrays: bool) -> pa.Table:
    """The parse query's answer for ``values``: with the array checks (as every batch had it), or without."""
    batch = pa.table({"__i": pa.array(np.arange(len(values), dtype=np.int64)),
                      "__raw": pa.array(values, pa.binary())})
    rollup._con.register("batch", batch)
    try:
        return arrow_query(rollup._con, rollup._parse_query(None, arrays))
    finally:
        rollup._con.unregister("batch")


def _exactly(table: pa.Table) -> tuple[Any, str]:
    """A table's schema and values as text: -0.0 is not 0.0, and the order counts."""
    return table.schema, repr(table.to_pylist())


@pytest.mark.parametrize("name", ["wikipedia", "events"])
def test_a_batch_without_brackets_gets_the_full_querys_answer(name: str) -> None:
    spec = load_example(name)
    rollup = Rollup(RollupSchema.from_spec(spec.spec.data_schema, spec.spec.io_config.input_format),
                    min_time=datetime(2025, 1, 1, tzinfo=UTC))
    values = TRICKY + [value.replace(b'"time"', b'"ts"') for value in TRICKY if value is not None]
    assert not any(b"[" in value for value in values if value is not None)
    assert rollup._may_hold_arrays(pa.array(values, pa.binary())) is False
    full, short = _classified(rollup, values, True), _classified(rollup, values, False)
    assert len(short.column("__status").unique()) == 3  # good, bad and thrown-away records all met
    assert _exactly(short) == _exactly(full)
    parsed = rollup.parse(values)
    assert parsed.bad_count == full.column("__status").to_pylist().count(1)
    rollup.close()


def test_a_batch_with_a_bracket_gets_the_full_query() -> None:
    spec = load_example("wikipedia")
    rollup = Rollup(RollupSchema.from_spec(spec.spec.data_schema, spec.spec.io_config.input_format))
    values = [b'{"time": "2026-11-01T12:00:00Z", "page": ["a"], "user": ["b", "c"]}', *TRICKY]
    assert rollup._may_hold_arrays(pa.array(values, pa.binary())) is True
    parsed = rollup.parse(values)
    assert next(d for d in rollup.schema.dimensions if d.name == "user").multi_value  # the array found
    assert [r["page"] for r in parsed.rows.to_pylist() if r["user"] == ["b", "c"]] == ["a"]
    rollup.close()


@pytest.mark.parametrize("segment", ["HOUR", "DAY", "WEEK", "MONTH", "QUARTER", "YEAR", "ALL", "SIX_HOUR",
                                     "FIFTEEN_MINUTE"])
def test_segment_intervals_without_a_query_are_the_querys(segment: str) -> None:
    rollup = Rollup(RollupSchema.from_spec(spec_schema("NONE", segment)))
    times = ["2024-01-31T23:59:59.999Z", "2024-02-29T12:00:00Z", "2024-02-27T13:00:00.001Z", "1999-12-31T23:00:00Z",
             "2024-02-27T13:14:59Z", "2024-02-27T13:15:00Z", "2024-12-31T23:59:59Z"]
    rows = rollup.parse([json.dumps({"t": t, "a": "x", "v": 1}).encode() for t in times]).rows
    found = rollup.split_by_segment(rows)
    rollup._con.register("rows", rows)
    end = bucket_end_sql(rollup.schema.segment_granularity, "__segment_start")
    queried = rollup._con.execute(f"SELECT DISTINCT __segment_start, {end} FROM rows ORDER BY 1").fetchall()
    rollup._con.unregister("rows")
    assert [(start, stop) for start, stop, _ in found] == [
        (start.replace(tzinfo=UTC), stop.replace(tzinfo=UTC)) for start, stop in queried]
    assert sum(part.num_rows for *_, part in found) == len(times)
    rollup.close()
