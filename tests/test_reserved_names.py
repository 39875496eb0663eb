"""Field and column names cannot collide with the rollup's internals or the segment schema."""

from __future__ import annotations

import json

import pytest

from indexing_task.rollup import Rollup
from indexing_task.rollup_schema import RollupSchema
from specs import SpecError, load_supervisor_spec

INTERNAL_LOOKING = ["s", "f", "valid", "ok", "is_null", "raw", "batch", "src", "obj", "ext", "typed"]


def spec(dimensions: list[object], metrics: list[dict[str, object]] | None = None) -> dict[str, object]:
    return {"type": "kafka", "spec": {
        "dataSchema": {
            "dataSource": "names", "timestampSpec": {"column": "t", "format": "iso"},
            "dimensionsSpec": {"dimensions": dimensions},
            "metricsSpec": metrics or [{"type": "count", "name": "cnt"}],
            "granularitySpec": {"segmentGranularity": "DAY", "queryGranularity": "HOUR"}},
        "ioConfig": {"topic": "names"}}}


def test_dimensions_named_like_the_parsers_internals_keep_their_own_values() -> None:
    schema = RollupSchema.from_spec(load_supervisor_spec(spec(INTERNAL_LOOKING, [
        {"type": "count", "name": "cnt"}, {"type": "longSum", "name": "total", "fieldName": "ok"}])).spec.data_schema)
    record = {"t": "2026-01-01T10:20:00Z", **{name: f"value-of-{name}" for name in INTERNAL_LOOKING}}
    record["ok"] = "7"  # also summed as a metric
    rollup = Rollup(schema)
    try:
        parsed = rollup.parse([json.dumps(record).encode()])
    finally:
        rollup.close()
    assert parsed.bad_count == 0, parsed.bad_samples
    (row,) = parsed.rows.to_pylist()
    assert {name: row[name] for name in INTERNAL_LOOKING} == {name: record[name] for name in INTERNAL_LOOKING}
    assert row["total"] == 7 and row["cnt"] == 1


@pytest.mark.parametrize(("dimensions", "metrics", "path"), [
    (["__time"], None, "spec.dataSchema.dimensionsSpec.dimensions[0].name"),
    (["a", "__anything"], None, "spec.dataSchema.dimensionsSpec.dimensions[1].name"),
    (["a"], [{"type": "count", "name": "__time"}], "spec.dataSchema.metricsSpec[0].name"),
    (["a"], [{"type": "count", "name": "__n"}], "spec.dataSchema.metricsSpec[0].name"),
])
def test_names_the_schema_reserves_are_refused_naming_the_path(
        dimensions: list[object], metrics: list[dict[str, object]] | None, path: str) -> None:
    with pytest.raises(SpecError) as refused:
        load_supervisor_spec(spec(dimensions, metrics))
    assert [p for p, _ in refused.value.errors] == [path]
    assert "reserved" in str(refused.value)
