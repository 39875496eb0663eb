"""Records that used to stall a partition (the task failed, and its retry failed the same way) or
were dropped without a count: each now ends as processed or unparseable with a reason.
"""

from __future__ import annotations

import json

import pytest

from indexing_task.rollup import Rollup
from indexing_task.rollup_schema import RollupSchema
from specs import load_supervisor_spec


def schema(ts_format: str = "auto", segment: str = "DAY", query: str = "HOUR") -> RollupSchema:
    return RollupSchema.from_spec(load_supervisor_spec({"type": "kafka", "spec": {
        "dataSchema": {
            "dataSource": "hostile", "timestampSpec": {"column": "t", "format": ts_format},
            "dimensionsSpec": {"dimensions": ["k"]},
            "metricsSpec": [{"type": "count", "name": "cnt"}, {"type": "longSum", "name": "v", "fieldName": "v"}],
            "granularitySpec": {"segmentGranularity": segment, "queryGranularity": query}},
        "ioConfig": {"topic": "hostile"}}}).spec.data_schema)


def parse(rollup_schema: RollupSchema, records: list[dict[str, object]]) -> tuple[list[dict[str, object]], list[str]]:
    rollup = Rollup(rollup_schema)
    try:
        parsed = rollup.parse([json.dumps(r).encode() for r in records])
    finally:
        rollup.close()
    assert parsed.bad_count == len(parsed.bad_samples)
    return parsed.rows.to_pylist(), [b.reason for b in parsed.bad_samples]


def test_a_long_sum_past_64_bits_wraps_around_like_druids() -> None:
    big = 2**62
    rows, bad = parse(schema(), [{"t": "2026-01-01T10:00:00Z", "k": "a", "v": big}] * 2
                      + [{"t": "2026-01-01T10:00:00Z", "k": "b", "v": 2**63 - 1}, {"t": "2026-01-01T10:00:00Z",
                                                                                  "k": "b", "v": 1}])
    assert bad == []
    assert {r["k"]: (r["cnt"], r["v"]) for r in rows} == {"a": (2, -(2**63)), "b": (2, -(2**63))}


@pytest.mark.parametrize("value", [
    "10000-01-01T00:00:00Z", "0000-06-01T00:00:00Z", "-0001-01-01T00:00:00Z", 253402300800000,
    "infinity", "-infinity", "epoch", "now", "3000-01-01T00:00:00Z", "0999-12-31T23:59:59Z",
])
def test_timestamps_outside_the_supported_range_are_unparseable_with_a_reason(value: object) -> None:
    rows, bad = parse(schema(), [{"t": value, "k": "x", "v": 1}, {"t": "2026-01-01T10:00:00Z", "k": "ok", "v": 1}])
    assert [r["k"] for r in rows] == ["ok"]
    assert len(bad) == 1 and "timestamp" in bad[0], bad


def test_the_last_hours_and_years_that_fit_are_indexed() -> None:
    rows, bad = parse(schema(segment="YEAR"), [{"t": "2999-12-31T23:30:00Z", "k": "late", "v": 1},
                                                 {"t": "1000-01-01T00:00:00Z", "k": "early", "v": 1}])
    assert bad == [] and sorted(r["k"] for r in rows) == ["early", "late"]
