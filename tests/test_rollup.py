"""The DuckDB rollup against a plain Python reference computation on random data."""

from __future__ import annotations

import json
import random
import warnings
import zlib
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from indexing_task.arrow_queries import arrow_query
from indexing_task.buckets import bucket_end_sql, bucket_start_sql
from indexing_task.rollup import Rollup
from indexing_task.rollup_schema import RollupSchema
from specs import Granularity, load_supervisor_spec
from specs.granularity import ALL_END, ALL_START

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def spec_schema(query: str, segment: str, rollup: bool = True, ts_format: str = "iso",
                transform_spec: dict[str, Any] | None = None) -> Any:
    return load_supervisor_spec({"type": "kafka", "spec": {
        "dataSchema": {
            "dataSource": "ref",
            "timestampSpec": {"column": "t", "format": ts_format},
            "dimensionsSpec": {"dimensions": ["a", "b", {"type": "long", "name": "n"}]},
            "metricsSpec": [{"type": "count", "name": "cnt"},
                            {"type": "longSum", "name": "v_sum", "fieldName": "v"},
                            {"type": "longMin", "name": "v_min", "fieldName": "v"},
                            {"type": "longMax", "name": "v_max", "fieldName": "v"},
                            {"type": "doubleSum", "name": "x_sum", "fieldName": "x"},
                            {"type": "doubleMax", "name": "x_max", "fieldName": "x"}],
            "granularitySpec": {"segmentGranularity": segment, "queryGranularity": query, "rollup": rollup},
            "transformSpec": transform_spec or {}},
        "ioConfig": {"topic": "ref"}}}).spec.data_schema


def encode_time(ts: datetime, ts_format: str) -> Any:
    ms = (ts - EPOCH) // timedelta(milliseconds=1)
    return {"iso": ts.isoformat().replace("+00:00", "Z"), "millis": ms, "posix": ms / 1000,
            "micro": ms * 1000, "nano": ms * 1_000_000, "auto": ms}[ts_format]


def random_records(n: int, span: timedelta, ts_format: str, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    start = datetime(2024, 2, 27, 13, tzinfo=UTC)
    records = []
    for _ in range(n):
        ts = start + timedelta(milliseconds=rng.randrange(int(span.total_seconds() * 1000)))
        record = {"t": encode_time(ts, ts_format), "a": rng.choice(["x", "y", "z", None]),
                  "b": rng.choice(["p", "q"]), "n": rng.randrange(3), "v": rng.randint(-100, 100),
                  "x": rng.choice([None, round(rng.uniform(-5, 5), 3)]), "_ts": ts}
        records.append(record)
    return records


def plus_zero(x: float | None) -> float | None:
    """``x`` with -0.0 as 0.0: equal, but rows sort by ``repr`` (DuckDB's sum of -0.0 is -0.0, Python's 0.0)."""
    return None if x is None else x + 0.0


def reference(records: list[dict[str, Any]], query: Granularity, segment: Granularity,
              rollup: bool) -> list[tuple[Any, ...]]:
    """Group and aggregate in plain Python; rows as (segment start, time, a, b, n, metrics...)."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    rows = []
    for r in records:
        key = (segment.truncate(r["_ts"]), query.truncate(r["_ts"]), r["a"], r["b"], r["n"])
        if rollup:
            groups[key].append(r)
        else:
            groups[(*key, len(rows))] = [r]
            rows.append(r)
    out = []
    for key, members in groups.items():
        xs = [m["x"] for m in members if m["x"] is not None]
        out.append((*key[:5], len(members), sum(m["v"] for m in members), min(m["v"] for m in members),
                    max(m["v"] for m in members), plus_zero(round(sum(xs), 6) if xs else None),  # no value: NULL
                    plus_zero(max(xs) if xs else None)))
    return sorted(out, key=repr)


def indexed(records: list[dict[str, Any]], schema: RollupSchema, chunks: int) -> list[tuple[Any, ...]]:
    """Run the real rollup over ``chunks`` batches, merge them and cut per segment."""
    values = [json.dumps({k: v for k, v in r.items() if k != "_ts"}).encode() for r in records]
    rollup = Rollup(schema)
    size = -(-len(values) // chunks)
    partials = []
    for i in range(0, len(values), size):
        parsed = rollup.parse(values[i:i + size])
        assert parsed.bad_count == 0, parsed.bad_samples
        partials.append(parsed.rows)
    out = []
    for start, _end, table in rollup.split_by_segment(rollup.merge(partials)):
        for row in table.to_pylist():
            out.append((start, row["__time"].astimezone(UTC), row["a"], row["b"], row["n"], row["cnt"], row["v_sum"],
                        row["v_min"], row["v_max"], plus_zero(None if row["x_sum"] is None else round(row["x_sum"], 6)),
                        plus_zero(row["x_max"])))
    rollup.close()
    return sorted(out, key=repr)


@pytest.mark.parametrize(("query", "segment", "span"), [
    ("NONE", "HOUR", timedelta(hours=3)),
    ("MINUTE", "HOUR", timedelta(hours=5)),
    ("FIFTEEN_MINUTE", "DAY", timedelta(days=3)),
    ("HOUR", "WEEK", timedelta(days=20)),
    ("DAY", "MONTH", timedelta(days=80)),
    ("WEEK", {"type": "period", "period": "P4W"}, timedelta(days=200)),
    ("MONTH", "YEAR", timedelta(days=700)),
    ("ALL", "ALL", timedelta(days=10)),
    ({"type": "period", "period": "PT5M"}, {"type": "duration", "duration": 7_200_000}, timedelta(hours=6)),
    # month periods that do not divide 360 months: bucket origins must agree with Granularity's
    ({"type": "period", "period": "P1M"}, {"type": "period", "period": "P7M"}, timedelta(days=2000)),
    ({"type": "period", "period": "P11M"}, {"type": "period", "period": "P22M"}, timedelta(days=4000)),
    ({"type": "period", "period": "P3D"}, {"type": "period", "period": "P6D"}, timedelta(days=90)),
])
@pytest.mark.parametrize("rollup", [True, False])
def test_rollup_matches_reference(query: Any, segment: Any, span: timedelta, rollup: bool) -> None:
    data_schema = spec_schema(query, segment, rollup)
    records = random_records(3_000, span, "iso", seed=zlib.crc32(repr((query, rollup)).encode()) % 1000)
    gran = data_schema.granularity_spec
    expected = reference(records, gran.query_granularity, gran.segment_granularity, rollup)
    assert indexed(records, RollupSchema.from_spec(data_schema), chunks=3) == expected


@pytest.mark.parametrize("name", ["NONE", "ALL", "SECOND", "PT1.5S", "PT7M", "HOUR", "DAY", "P3D", "WEEK", "P2W",
                                  "MONTH", "QUARTER", "P7M", "P11M", "YEAR", "P5Y"])
def test_sql_buckets_are_the_granularity_buckets(name: str) -> None:
    """The rollup's SQL buckets as ``Granularity.truncate`` and ``bucket_end`` do, before 1970 too."""
    g = Granularity.parse(name)
    rng = random.Random(name)
    span_ms = (ALL_END - ALL_START) // timedelta(milliseconds=1)
    times = [ALL_START, EPOCH - timedelta(milliseconds=1), EPOCH,
             *(ALL_START + timedelta(milliseconds=rng.randrange(span_ms)) for _ in range(500))]
    start = bucket_start_sql(g, "t")
    with duckdb.connect() as con:
        rows = con.execute(f"SELECT {start}, {bucket_end_sql(g, start)} FROM unnest(?::TIMESTAMP[]) AS u(t)",
                           [[t.replace(tzinfo=None) for t in times]]).fetchall()
    assert [(s.replace(tzinfo=UTC), e.replace(tzinfo=UTC)) for s, e in rows] == [
        (g.truncate(t), g.bucket_end(t)) for t in times]


@pytest.mark.parametrize("ts_format", ["iso", "millis", "posix", "micro", "nano", "auto"])
def test_timestamp_formats(ts_format: str) -> None:
    data_schema = spec_schema("SECOND", "HOUR", True, ts_format)
    records = random_records(500, timedelta(hours=2), ts_format, seed=3)
    gran = data_schema.granularity_spec
    expected = reference(records, gran.query_granularity, gran.segment_granularity, True)
    assert indexed(records, RollupSchema.from_spec(data_schema), chunks=1) == expected


def test_bad_records_get_reasons_and_good_ones_survive() -> None:
    rollup = Rollup(RollupSchema.from_spec(spec_schema("NONE", "HOUR")))
    good = {"t": "2024-01-01T10:00:00Z", "a": True, "b": 12, "n": 1, "v": "7", "x": 1.5}
    values: list[bytes | None] = [
        json.dumps(good).encode(), b"not json", b"[1, 2]", None, b"\xff\xfe", b'{"a": "x"}',
        b'{"t": "yesterday"}', json.dumps({**good, "v": "seven"}).encode(),
        json.dumps({**good, "n": "one"}).encode(), b'{"t": "2024-01-01T10:00:00Z"}{"t": 1}']
    parsed = rollup.parse(values)
    reasons = {bad.index: bad.reason for bad in parsed.bad_samples}
    assert reasons == {1: "invalid JSON", 2: "not a JSON object", 3: "null value", 4: "not valid UTF-8",
                       5: "missing timestamp", 6: "invalid timestamp", 7: "wrong type for v (long)",
                       8: "wrong type for n (long)", 9: "invalid JSON"}
    assert parsed.bad_count == 9
    (row,) = parsed.rows.to_pylist()
    # Like Druid, a string dimension takes any scalar as text, and "7" is a fine long.
    assert (row["a"], row["b"], row["v_sum"], row["cnt"]) == ("true", "12", 7, 1)


def test_an_array_for_a_string_dimension_makes_it_multi_value_never_its_json_text() -> None:
    """Druid ingests a JSON array as a multi-value dimension: the dimension becomes a list column
    (``tests/test_multi_value.py``), never the text ``["x","y"]``; an object is kept as its JSON text.
    """
    rollup = Rollup(RollupSchema.from_spec(spec_schema("NONE", "HOUR")))
    good = {"t": "2024-01-01T10:00:00Z", "a": "[not an array", "b": "q", "n": 1, "v": 7, "x": 1.5}
    values = [json.dumps(record).encode() for record in (
        good, {**good, "a": ["y", "x"]}, {**good, "b": {"k": 1}}, {**good, "a": []})]
    parsed = rollup.parse(values)
    assert parsed.bad_count == 0 and rollup.schema.complex_columns == {"a": "multi_value"}
    assert sorted(row["b"] for row in parsed.rows.to_pylist()) == ["q", "q", "q", '{"k":1}']  # an object: its JSON
    assert sorted((row["a"] or [] for row in parsed.rows.to_pylist()), key=repr) == sorted(
        [[], ["[not an array"], ["[not an array"], ["x", "y"]], key=repr)


def test_time_bounds_apply_to_the_event_time_before_truncation_and_count_as_thrown_away() -> None:
    """Druid rejects by the record's own timestamp: 10:00:30 is kept with a bound of 10:00:15 even
    though its MINUTE bucket (10:00) starts before the bound; the latest time itself is kept. A record
    thrown away is not also checked: its bad metric is no parse error.
    """
    bounds = (datetime(2024, 1, 1, 10, 0, 15, tzinfo=UTC), datetime(2024, 1, 1, 10, 5, tzinfo=UTC))
    rollup = Rollup(RollupSchema.from_spec(spec_schema("MINUTE", "HOUR")), *bounds)
    times = ["10:00:10", "10:00:30", "10:04:59.999", "10:05:00", "10:05:00.001"]
    values = [json.dumps({"t": f"2024-01-01T{t}Z", "a": "x", "v": 1}).encode() for t in times]
    values.append(json.dumps({"t": "2024-01-01T09:00:00Z", "a": "x", "v": "many"}).encode())
    parsed = rollup.parse(values)
    assert parsed.thrown_away == 3 and parsed.bad_count == 0
    assert sum(row["cnt"] for row in parsed.rows.to_pylist()) == 3


def _in_window(r: dict[str, Any]) -> bool:
    return datetime(2024, 2, 27, 13, 30, tzinfo=UTC) <= r["_ts"] < datetime(2024, 2, 27, 14, tzinfo=UTC)


FILTERS: list[tuple[dict[str, Any], Any]] = [
    ({"type": "selector", "dimension": "a", "value": "x"}, lambda r: r["a"] == "x"),
    ({"type": "selector", "dimension": "a", "value": None}, lambda r: r["a"] is None),
    ({"type": "selector", "dimension": "n", "value": "2"}, lambda r: r["n"] == 2),  # a number's string form
    ({"type": "in", "dimension": "a", "values": ["y", None]}, lambda r: r["a"] in ("y", None)),
    ({"type": "not", "field": {"type": "selector", "dimension": "a", "value": "x"}},
     lambda r: r["a"] is not None and r["a"] != "x"),  # three-valued, as Druid's default mode
    ({"type": "bound", "dimension": "v", "lower": "10", "upper": "50", "upperStrict": True, "ordering": "numeric"},
     lambda r: 10 <= r["v"] < 50),
    ({"type": "bound", "dimension": "v", "lower": "50", "ordering": "lexicographic"}, lambda r: str(r["v"]) >= "50"),
    ({"type": "range", "column": "x", "matchValueType": "DOUBLE", "lower": 0, "lowerOpen": True},
     lambda r: r["x"] is not None and r["x"] > 0),
    ({"type": "equals", "column": "b", "matchValueType": "STRING", "matchValue": "q"}, lambda r: r["b"] == "q"),
    ({"type": "like", "dimension": "a", "pattern": "%y"}, lambda r: r["a"] == "y"),
    ({"type": "regex", "dimension": "b", "pattern": "[pz]"}, lambda r: r["b"] == "p"),
    ({"type": "null", "column": "x"}, lambda r: r["x"] is None),
    ({"type": "interval", "dimension": "__time", "intervals": ["2024-02-27T13:30:00Z/2024-02-27T14:00:00Z"]},
     _in_window),
    ({"type": "or", "fields": [{"type": "selector", "dimension": "b", "value": "p"},
                               {"type": "and", "fields": [{"type": "selector", "dimension": "a", "value": "z"},
                                                          {"type": "bound", "dimension": "v", "upper": "0",
                                                           "ordering": "numeric"}]}]},
     lambda r: r["b"] == "p" or (r["a"] == "z" and r["v"] <= 0)),
]


@pytest.mark.parametrize(("filter_", "keep"), FILTERS, ids=[f"{f['type']}-{i}" for i, (f, _) in enumerate(FILTERS)])
def test_a_transform_filter_keeps_what_the_reference_keeps_and_throws_the_rest_away(filter_: Any, keep: Any) -> None:
    records = random_records(2_000, timedelta(hours=2), "iso", seed=11)
    schema = RollupSchema.from_spec(spec_schema("NONE", "HOUR", transform_spec={"filter": filter_}))
    rollup = Rollup(schema)
    parsed = rollup.parse([json.dumps({k: v for k, v in r.items() if k != "_ts"}).encode() for r in records])
    kept = [r for r in records if keep(r)]
    assert 0 < len(kept) < len(records)
    assert (parsed.bad_count, parsed.thrown_away) == (0, len(records) - len(kept))
    assert sum(parsed.rows.column("cnt").to_pylist()) == len(kept)
    assert sum(parsed.rows.column("v_sum").to_pylist()) == sum(r["v"] for r in kept)


def test_a_filtered_out_record_is_thrown_away_even_with_a_bad_metric_value() -> None:
    """Druid filters before it aggregates: a bad metric in a record the filter drops is not a parse error."""
    schema = RollupSchema.from_spec(spec_schema("NONE", "HOUR", transform_spec={
        "filter": {"type": "selector", "dimension": "a", "value": "x"}}))
    values = [json.dumps({"t": "2024-01-01T10:00:00Z", "a": a, "v": "seven"}).encode() for a in ("x", "y")]
    parsed = Rollup(schema).parse(values)
    assert (parsed.bad_count, parsed.thrown_away) == (1, 1)
    assert parsed.bad_samples[0].index == 0


def _flatten_schema(flatten: dict[str, Any]) -> RollupSchema:
    spec = load_supervisor_spec({"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "flat", "timestampSpec": {"column": "t", "format": "iso"},
                       "dimensionsSpec": {"dimensions": ["country", "device"]},
                       "metricsSpec": [{"type": "count", "name": "cnt"},
                                       {"type": "longSum", "name": "last_sum", "fieldName": "last"}],
                       "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "HOUR"},
                       "transformSpec": {"filter": {"type": "not", "field": {
                           "type": "selector", "dimension": "city", "value": "Paris"}}}},
        "ioConfig": {"topic": "flat", "inputFormat": {"type": "json", "flattenSpec": flatten}}}})
    return RollupSchema.from_spec(spec.spec.data_schema, spec.spec.io_config.input_format)


def _nested_record(country: str, city: str, stats: list[int]) -> bytes:
    return json.dumps({"meta": {"ts": "2024-01-01T10:20:00Z", "geo": {"country": country, "city": city}},
                       "device": "phone", "stats": stats}).encode()


def test_flattened_fields_are_read_from_nested_values() -> None:
    schema = _flatten_schema({"useFieldDiscovery": True, "fields": [
        {"type": "path", "name": "t", "expr": "$.meta.ts"},
        {"type": "jq", "name": "country", "expr": ".meta.geo.country"},
        {"type": "path", "name": "city", "expr": "$['meta']['geo']['city']"},
        {"type": "path", "name": "last", "expr": "$.stats[-1]"}]})
    parsed = Rollup(schema).parse([_nested_record("DE", "Berlin", [1, 2, 3]), _nested_record("DE", "Bonn", [4]),
                                   _nested_record("FR", "Paris", [5, 6]), _nested_record("FR", "Lyon", [7, 8])])
    assert (parsed.bad_count, parsed.thrown_away) == (0, 1)  # the filter reads a flattened field too
    assert sorted((r["country"], r["device"], r["cnt"], r["last_sum"]) for r in parsed.rows.to_pylist()) == [
        ("DE", "phone", 2, 7), ("FR", "phone", 1, 8)]


def test_without_field_discovery_only_listed_fields_exist() -> None:
    schema = _flatten_schema({"useFieldDiscovery": False, "fields": [
        {"type": "path", "name": "t", "expr": "$.meta.ts"}, {"type": "root", "name": "stats"},
        {"type": "path", "name": "country", "expr": "$.meta.geo.country"},
        {"type": "path", "name": "city", "expr": "$.meta.geo.city"}]})
    parsed = Rollup(schema).parse([_nested_record("DE", "Berlin", [1])])
    # device and last are top-level or nested in the record, but not listed: absent, as in Druid (a sum
    # of no value is NULL, as in Druid's SQL-compatible null handling)
    assert [(r["country"], r["device"], r["last_sum"]) for r in parsed.rows.to_pylist()] == [("DE", None, None)]


def _discovery_schema(dimensions_spec: dict[str, Any], flatten: dict[str, Any] | None = None) -> RollupSchema:
    spec = load_supervisor_spec({"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "disc", "timestampSpec": {"column": "t", "format": "iso"},
                       "dimensionsSpec": dimensions_spec,
                       "metricsSpec": [{"type": "count", "name": "cnt"},
                                       {"type": "longSum", "name": "v_sum", "fieldName": "v"}],
                       "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "HOUR"}},
        "ioConfig": {"topic": "disc", "inputFormat": {"type": "json", "flattenSpec": flatten or {}}}}})
    return RollupSchema.from_spec(spec.spec.data_schema, spec.spec.io_config.input_format)


def _event(**fields: Any) -> bytes:
    return json.dumps({"t": "2024-01-01T10:00:00Z", "v": 1, **fields}).encode()


def test_discovered_dimensions_are_every_field_but_the_timestamp_metrics_and_exclusions() -> None:
    """Druid's string discovery: fields seen in any batch become string dimensions; rows without one hold null."""
    rollup = Rollup(_discovery_schema({"dimensions": [], "dimensionExclusions": ["debug"]}))
    first = rollup.parse([_event(country="DE", debug="x"), _event(country="FR", cnt=9, v_sum=3)])
    second = rollup.parse([_event(country="DE", n=5, flag=True), _event(country="DE", __hidden="y")])
    assert [d.name for d in rollup.schema.dimensions] == ["country", "flag", "n"]
    merged = rollup.merge([first.rows, second.rows])
    rows = sorted(((r["country"], r["flag"], r["n"], r["cnt"], r["v_sum"]) for r in merged.to_pylist()), key=repr)
    assert rows == [("DE", "true", "5", 1, 1), ("DE", None, None, 2, 2), ("FR", None, None, 1, 1)]
    [(_, _, table)] = rollup.split_by_segment(merged)
    assert table.column_names == ["__time", "country", "flag", "n", "cnt", "v_sum"]
    assert table.schema.field("n").type == pa.string()


def test_include_all_dimensions_keeps_the_listed_types_and_discovers_the_rest() -> None:
    rollup = Rollup(_discovery_schema({"dimensions": [{"name": "n", "type": "long"}], "includeAllDimensions": True}))
    parsed = rollup.parse([_event(n=5, city="Bonn")])
    assert [(d.name, d.type) for d in rollup.schema.dimensions] == [("n", "long"), ("city", "string")]
    assert [(r["n"], r["city"]) for r in rollup.merge([parsed.rows]).to_pylist()] == [(5, "Bonn")]


def test_discovery_with_a_flatten_spec_offers_its_fields_and_only_them_without_field_discovery() -> None:
    flatten = {"useFieldDiscovery": False, "fields": [{"type": "path", "name": "t", "expr": "$.meta.ts"},
                                                      {"type": "jq", "name": "city", "expr": ".geo.city"}]}
    rollup = Rollup(_discovery_schema({"dimensions": []}, flatten))
    parsed = rollup.parse([json.dumps({"meta": {"ts": "2024-01-01T10:00:00Z"}, "geo": {"city": "Bonn"},
                                       "country": "DE", "v": 1}).encode()])
    assert [(r["city"], r["cnt"], r["v_sum"]) for r in rollup.merge([parsed.rows]).to_pylist()] == [
        ("Bonn", 1, None)]  # v is not a listed field: the sum saw no value
    assert [d.name for d in rollup.schema.dimensions] == ["city"]


def test_transforms_replace_and_add_fields_that_dimensions_metrics_and_the_filter_see() -> None:
    """Each transform reads the record as it arrived; what it makes replaces the field of its name."""
    records = random_records(2_000, timedelta(hours=2), "iso", seed=5)
    schema = RollupSchema.from_spec(spec_schema("NONE", "HOUR", transform_spec={
        "transforms": [{"type": "expression", "name": "a", "expression": "upper(a)"},
                       {"type": "expression", "name": "v", "expression": "v * 2"},
                       {"type": "expression", "name": "n", "expression": "n + 10"},
                       {"type": "expression", "name": "b", "expression": "concat(b, '-', v)"}],
        "filter": {"type": "bound", "dimension": "v", "lower": "0", "ordering": "numeric"}}))
    parsed = Rollup(schema).parse([json.dumps({k: v for k, v in r.items() if k != "_ts"}).encode() for r in records])
    kept = [r for r in records if r["v"] * 2 >= 0]
    assert (parsed.bad_count, parsed.thrown_away) == (0, len(records) - len(kept))
    rows = parsed.rows.to_pylist()
    assert sum(r["cnt"] for r in rows) == len(kept) and sum(r["v_sum"] for r in rows) == sum(2 * r["v"] for r in kept)
    assert {r["a"] for r in rows} == {None if r["a"] is None else r["a"].upper() for r in kept}
    assert {r["n"] for r in rows} == {r["n"] + 10 for r in kept}  # a long dimension from a LONG transform
    assert {r["b"] for r in rows} == {f"{r['b']}-{r['v']}" for r in kept}  # the record's v, not the transform's


def test_a_transform_that_gives_an_array_for_a_string_dimension_makes_the_record_unparseable() -> None:
    schema = RollupSchema.from_spec(spec_schema("NONE", "HOUR", transform_spec={
        "transforms": [{"type": "expression", "name": "a", "expression": "nvl(tags, a)"}]}))
    values = [json.dumps({"t": "2024-01-01T10:00:00Z", "a": "x", "v": 1, **extra}).encode()
              for extra in ({}, {"tags": ["p", "q"]})]
    parsed = Rollup(schema).parse(values)
    assert [(b.index, b.reason) for b in parsed.bad_samples] == [
        (1, "transform a gave a JSON array or object, not a string")]


def _filtered_schema(rollup: bool) -> RollupSchema:
    spec = load_supervisor_spec({"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "f", "timestampSpec": {"column": "t", "format": "iso"},
                       "dimensionsSpec": {"dimensions": ["b"]},
                       "metricsSpec": [
                           {"type": "count", "name": "cnt"},
                           {"type": "filtered", "filter": {"type": "selector", "dimension": "a", "value": "x"},
                            "aggregator": {"type": "count", "name": "x_cnt"}},
                           {"type": "filtered", "name": "x_v", "filter": {"type": "in", "dimension": "a",
                                                                          "values": ["x", "y"]},
                            "aggregator": {"type": "longSum", "name": "ignored", "fieldName": "v"}},
                           {"type": "filtered", "filter": {"type": "bound", "dimension": "v", "lower": "0",
                                                           "ordering": "numeric"},
                            "aggregator": {"type": "doubleMax", "name": "pos_x_max", "fieldName": "x"}}],
                       "granularitySpec": {"segmentGranularity": "DAY", "queryGranularity": "DAY", "rollup": rollup}},
        "ioConfig": {"topic": "f"}}})
    return RollupSchema.from_spec(spec.spec.data_schema)


@pytest.mark.parametrize("rollup", [True, False])
def test_a_filtered_aggregator_aggregates_only_the_records_its_filter_matches(rollup: bool) -> None:
    records = random_records(3_000, timedelta(hours=5), "iso", seed=3)
    values = [json.dumps({k: v for k, v in r.items() if k != "_ts"}).encode() for r in records]
    engine = Rollup(_filtered_schema(rollup))
    merged = engine.merge([engine.parse(values[:1_000]).rows, engine.parse(values[1_000:]).rows])
    rows = merged.to_pylist()
    for b in ("p", "q"):
        mine = [r for r in records if r["b"] == b]
        got = [r for r in rows if r["b"] == b]
        assert sum(r["cnt"] for r in got) == len(mine)
        assert sum(r["x_cnt"] for r in got) == sum(r["a"] == "x" for r in mine)
        assert sum(r["x_v"] for r in got if r["x_v"] is not None) == sum(r["v"] for r in mine if r["a"] in ("x", "y"))
        positive = [r["x"] for r in mine if r["v"] >= 0 and r["x"] is not None]
        assert max((r["pos_x_max"] for r in got if r["pos_x_max"] is not None), default=None) == max(positive)


def test_a_bad_value_in_a_record_a_filtered_aggregator_skips_is_not_a_parse_error() -> None:
    engine = Rollup(_filtered_schema(True))
    parsed = engine.parse([json.dumps({"t": "2024-01-01T00:00:00Z", "b": "p", "a": "z", "v": "many"}).encode()])
    assert parsed.bad_count == 0 and parsed.rows.to_pylist()[0]["x_v"] is None  # it summed no value


def test_the_kafka_format_reads_the_key_timestamp_topic_and_headers_as_fields() -> None:
    spec = load_supervisor_spec({"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "k", "timestampSpec": {"column": "kafka.timestamp", "format": "millis"},
                       "dimensionsSpec": {"dimensions": ["kafka.key", "kafka.topic", "kafka.header.env", "a"]},
                       "metricsSpec": [{"type": "count", "name": "cnt"}],
                       "granularitySpec": {"segmentGranularity": "DAY", "queryGranularity": "NONE"},
                       "transformSpec": {"transforms": [
                           {"type": "expression", "name": "a", "expression": 'concat(a, \'@\', "kafka.header.env")'}]}},
        "ioConfig": {"topic": "k", "inputFormat": {"type": "kafka", "valueFormat": {"type": "json"},
                                                  "keyFormat": {"type": "csv", "columns": ["id"]},
                                                  "headerFormat": {"type": "string"}}}}})
    schema = RollupSchema.from_spec(spec.spec.data_schema, spec.spec.io_config.input_format)
    assert schema.metadata_needs == ["timestamp", "key", "topic", "header:env"]
    values = [b'{"a": "x"}', b'{"a": "y"}', b'{"a": "z"}']
    metadata = {"timestamp": pa.array([1_700_000_000_000, 1_700_000_000_001, 1_700_000_000_002], pa.int64()),
                "key": pa.array([b"u1,rest", None, b'"q,uoted",x'], pa.binary()),
                "topic": pa.array(["k"] * 3), "header:env": pa.array([b"prod", None, b"dev"], pa.binary())}
    parsed = Rollup(schema).parse(values, metadata)
    assert [(b.index, b.reason) for b in parsed.bad_samples] == [(2, "a quoted CSV key (kafka.key) is not supported")]
    rows = sorted(parsed.rows.to_pylist(), key=lambda r: r["__time"])
    assert [(r["kafka.key"], r["kafka.topic"], r["kafka.header.env"], r["a"]) for r in rows] == [
        ("u1", "k", "prod", "x@prod"), (None, "k", None, None)]
    assert rows[0]["__time"].replace(tzinfo=UTC) == datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)


def _kafka_schema(dimensions: list[Any], transform_spec: dict[str, Any] | None = None,
                  key_format: str = "csv") -> RollupSchema:
    spec = load_supervisor_spec({"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "k", "timestampSpec": {"column": "t", "format": "iso"},
                       "dimensionsSpec": {"dimensions": dimensions},
                       "metricsSpec": [{"type": "count", "name": "cnt"}],
                       "granularitySpec": {"segmentGranularity": "DAY", "queryGranularity": "NONE"},
                       "transformSpec": transform_spec or {}},
        "ioConfig": {"topic": "k", "inputFormat": {"type": "kafka", "valueFormat": {"type": "json"},
                                                  "keyFormat": {"type": key_format},
                                                  "headerFormat": {"type": "string"}}}}})
    return RollupSchema.from_spec(spec.spec.data_schema, spec.spec.io_config.input_format)


def test_filters_see_kafka_metadata_and_odd_header_names_are_read() -> None:
    """Found in review: the filter saw metadata fields as null, and a '"' in a header name crashed the task."""
    schema = _kafka_schema(["a", 'kafka.header.x"y'], {
        "filter": {"type": "selector", "dimension": "kafka.topic", "value": "k"}})
    parsed = Rollup(schema).parse([b'{"t": "2024-01-01T00:00:00Z", "a": "v"}'], {
        "topic": pa.array(["k"]), 'header:x"y': pa.array([b"h"], pa.binary())})
    rows = parsed.rows.to_pylist()
    assert parsed.thrown_away == 0 and [(r["a"], r['kafka.header.x"y']) for r in rows] == [("v", "h")]


def test_a_quoted_csv_key_is_refused_even_in_a_record_holding_an_array() -> None:
    """Found in review: the array check ended the checks, so a quoted key after it was split wrongly."""
    schema = _kafka_schema(["a", "kafka.key"])
    parsed = Rollup(schema).parse([b'{"t": "2024-01-01T00:00:00Z", "a": "v", "tags": [1]}'], {
        "key": pa.array([b'"q,1",2'], pa.binary()), "topic": pa.array(["k"])})
    assert [b.reason for b in parsed.bad_samples] == ["a quoted CSV key (kafka.key) is not supported"]


def test_a_transform_named_like_the_timestamp_column_leaves_the_timestamp_alone() -> None:
    """Found in review: the timestamp was read from the transform's (absent) raw field, so every record failed."""
    schema = RollupSchema.from_spec(spec_schema("NONE", "HOUR", transform_spec={
        "transforms": [{"type": "expression", "name": "t", "expression": "upper(a)"}]}))
    parsed = Rollup(schema).parse([json.dumps({"t": "2024-01-01T10:00:00Z", "a": "x", "v": 1}).encode()])
    assert parsed.bad_count == 0 and sum(r["cnt"] for r in parsed.rows.to_pylist()) == 1


def test_discovery_skips_empty_and_case_clashing_keys_objects_and_nulls() -> None:
    """Found in review: an empty key crashed every batch; "CNT" replaced the cnt metric's column."""
    rollup = Rollup(_discovery_schema({"dimensions": []}))
    first = rollup.parse([_event(**{"": "e", "obj": {"x": 1}, "none": None, "country": "DE"})])
    second = rollup.parse([_event(country="FR"), _event(CNT="5"), _event(Country="fr")])
    assert [d.name for d in rollup.schema.dimensions] == ["country"]
    assert [(b.index, b.reason) for b in second.bad_samples] == [
        (1, "field CNT differs only in case from column cnt"),
        (2, "field Country differs only in case from column country")]
    assert sorted((r["country"], r["cnt"]) for r in rollup.merge([first.rows, second.rows]).to_pylist()) == [
        ("DE", 1), ("FR", 1)]


def _delimited_schema(input_format: dict[str, Any], dimensions: list[Any] | None = None) -> RollupSchema:
    spec = load_supervisor_spec({"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "csv", "timestampSpec": {"column": "t", "format": "iso"},
                       "dimensionsSpec": {"dimensions": ["country", "city"] if dimensions is None else dimensions},
                       "metricsSpec": [{"type": "count", "name": "cnt"},
                                       {"type": "longSum", "name": "v_sum", "fieldName": "v"}],
                       "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "HOUR"}},
        "ioConfig": {"topic": "csv", "inputFormat": input_format}}})
    return RollupSchema.from_spec(spec.spec.data_schema, spec.spec.io_config.input_format)


CSV = {"type": "csv", "columns": ["t", "country", "city", "v"]}


def test_csv_values_are_read_as_druid_reads_them() -> None:
    """Quotes (a doubled quote inside), empty values as null, extra values dropped, missing ones null."""
    rollup = Rollup(_delimited_schema(CSV))
    values: list[bytes | None] = [
        b'2024-01-01T10:00:00Z,DE,"Bonn, Rhein",5', b'2024-01-01T10:00:00Z,DE,"Bonn, Rhein",2\r\n',
        b'2024-01-01T10:05:00Z,"say ""hi""",,3,extra', b"2024-01-01T10:09:00Z,FR", b'"2024-01-01T10:10:00Z",FR,Paris,x']
    parsed = rollup.parse(values)
    assert [(b.index, b.reason) for b in parsed.bad_samples] == [(4, "wrong type for v (long)")]
    rows = sorted((r["country"], r["city"], r["cnt"], r["v_sum"]) for r in rollup.merge([parsed.rows]).to_pylist())
    assert rows == [("DE", "Bonn, Rhein", 2, 7), ("FR", None, 1, None), ('say "hi"', None, 1, 3)]  # as JSON's nulls


def test_a_csv_value_druid_would_read_otherwise_is_unparseable_with_the_reason() -> None:
    rollup = Rollup(_delimited_schema(CSV))
    values: list[bytes | None] = [
        b"2024-01-01T10:00:00Z,DE,Bonn,1\n2024-01-01T10:00:00Z,FR,Paris,1", b'2024-01-01T10:00:00Z,"DE"x,Bonn,1',
        b"2024-01-01T10:00:00Z,DE,Bonn,x", b"\xff", None, b"", b'2024-01-01T10:00:00Z,"a\nb",c,1']
    reasons = {b.index: b.reason for b in rollup.parse(values).bad_samples}
    assert reasons == {
        0: "several lines in one value (Druid reads each as a row)",
        1: "not a line of comma-separated values (a quote inside a value must be doubled, and the value quoted)",
        2: "wrong type for v (long)",
        3: "not valid UTF-8", 4: "null value", 5: "missing timestamp",
        6: "several lines in one value (Druid reads each as a row)"}


def test_tsv_values_split_at_the_delimiter_without_quotes() -> None:
    rollup = Rollup(_delimited_schema({"type": "tsv", "columns": ["t", "country", "city", "v"], "delimiter": "|",
                                       "listDelimiter": ";"}, dimensions=[]))
    parsed = rollup.parse([b'2024-01-01T10:00:00Z|"DE"|Bonn, Rhein|4', "2024-01-01T10:00:00Z||Köln|1".encode(),
                           b"2024-01-01T10:00:00Z|FR;DE;|x|1", b"2024-01-01T10:00:00Z|DE|x|1;2"])
    assert [(b.index, b.reason) for b in parsed.bad_samples] == [(3, "wrong type for v (long)")]  # as in Druid
    assert [d.name for d in rollup.schema.dimensions] == ["city", "country"]  # discovery: every column but t, v
    assert rollup.schema.complex_columns == {"country": "multi_value"}  # the listDelimiter splits a value
    rows = sorted(((r["country"] or [], r["city"], r["v_sum"]) for r in rollup.merge([parsed.rows]).to_pylist()),
                  key=repr)
    assert rows == sorted([([], "Köln", 1), (['"DE"'], "Bonn, Rhein", 4), ([None, "DE", "FR"], "x", 1)], key=repr)


AVRO_SCHEMA = {"type": "record", "name": "Edit", "fields": [
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "country", "type": "string"},
    {"name": "city", "type": ["null", "string"], "default": None},
    {"name": "v", "type": "int"},
    {"name": "geo", "type": {"type": "record", "name": "Geo", "fields": [{"name": "lat", "type": "double"}]}},
    {"name": "blob", "type": ["null", "bytes"], "default": None}]}


def _avro(**fields: Any) -> bytes:
    import io

    import fastavro

    record = {"ts": 1_704_103_200_000, "country": "DE", "city": None, "v": 1, "geo": {"lat": 50.7}, "blob": None,
              **fields}
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(AVRO_SCHEMA), record)
    return out.getvalue()


def _avro_schema(binary_as_string: bool = False) -> RollupSchema:
    spec = load_supervisor_spec({"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "avro", "timestampSpec": {"column": "ts", "format": "millis"},
                       "dimensionsSpec": {"dimensions": ["country", "city", "lat", "blob"]},
                       "metricsSpec": [{"type": "count", "name": "cnt"},
                                       {"type": "longSum", "name": "v_sum", "fieldName": "v"}],
                       "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "HOUR"}},
        "ioConfig": {"topic": "avro", "inputFormat": {
            "type": "avro_stream", "binaryAsString": binary_as_string,
            "avroBytesDecoder": {"type": "schema_inline", "schema": AVRO_SCHEMA},
            "flattenSpec": {"fields": [{"type": "path", "name": "lat", "expr": "$.geo.lat"}]}}}}})
    return RollupSchema.from_spec(spec.spec.data_schema, spec.spec.io_config.input_format)


def test_avro_values_are_read_as_druid_reads_them() -> None:
    """Logical types stay raw (a timestamp-millis is its long), unions give their value, nested fields flatten."""
    rollup = Rollup(_avro_schema())
    parsed = rollup.parse([_avro(v=2), _avro(v=3, city="Bonn"), _avro(country="FR", v=4), b"\x01garbage",
                           _avro(blob=b"x"), _avro(geo={"lat": float("nan")}), None])
    assert {b.index: b.reason for b in parsed.bad_samples} == {
        3: "not an Avro value of the spec's schema (EOFError)",
        4: "a bytes or fixed value (binaryAsString is false)", 5: "a NaN or infinite number", 6: "null value"}
    rows = sorted(((r["__time"].hour, r["country"], r["city"], r["lat"], r["cnt"], r["v_sum"])
                   for r in rollup.merge([parsed.rows]).to_pylist()), key=repr)
    assert rows == [(10, "DE", "Bonn", "50.7", 1, 3), (10, "DE", None, "50.7", 1, 2), (10, "FR", None, "50.7", 1, 4)]


def test_avro_bytes_are_text_with_binary_as_string() -> None:
    rollup = Rollup(_avro_schema(binary_as_string=True))
    parsed = rollup.parse([_avro(blob="héllo".encode()), _avro(blob=b"\xff")])
    assert [(b.index, b.reason) for b in parsed.bad_samples] == [(1, "a bytes or fixed value that is not UTF-8 text")]
    assert [r["blob"] for r in parsed.rows.to_pylist()] == ["héllo"]


@pytest.mark.unit
def test_a_query_whose_rows_fail_to_arrive_leaves_its_connection_usable() -> None:
    """An exception while the rows are fetched (here DuckDB's copy warning raised as an error) ends the result:
    the rollup's next statement on the same connection runs, instead of failing on an unfinished result.
    """
    con = duckdb.connect()
    con.register("batch", pa.table({"a": [1, 2]}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning):
            arrow_query(con, "SELECT a FROM batch")
    con.unregister("batch")  # what the parse does next, in its finally
    assert arrow_query(con, "SELECT 2 AS a").to_pylist() == [{"a": 2}]


@pytest.mark.parametrize("rollup", [True, False])
def test_a_single_interval_is_sorted_without_a_query_exactly_as_the_query_sorts_it(rollup: bool) -> None:
    """Issue 51: a trickle's task covers one segment interval; sorting it in Arrow saves a DuckDB query (~4 ms
    of a small task's ~18) and must give the very rows, in the very order, of ``ORDER BY ALL`` (byte-identical
    files whichever path wrote them).
    """
    schema = RollupSchema.from_spec(spec_schema("NONE", "DAY", rollup))
    records = random_records(2_000, timedelta(hours=3), "iso", seed=7)
    for i, r in enumerate(records[::5]):
        r["a"], r["x"] = None, -0.0 if r["x"] is None else None
        r["b"] = ["é", "Z", "ä", "😀", "", "z", "\u00ff", "ÿa"][i % 8]  # byte order, not code points or case
    rollup_ = Rollup(schema)
    rows = rollup_.parse([json.dumps({k: v for k, v in r.items() if k != "_ts"}).encode() for r in records]).rows
    [(start, end, fast)] = rollup_.split_by_segment(rows)
    columns = ", ".join(f'"{c}"' for c in schema.output_columns)
    rollup_._con.register("rows", rows)
    slow = arrow_query(rollup_._con, f"SELECT {columns} FROM rows ORDER BY ALL")
    rollup_.close()
    assert (start, end) == (datetime(2024, 2, 27, tzinfo=UTC), datetime(2024, 2, 28, tzinfo=UTC))
    assert [c.to_pylist() for c in fast.columns[1:]] == [c.to_pylist() for c in slow.columns[1:]]
    utc_ms = pa.timestamp("ms", tz="UTC")
    assert fast.column(0).cast(utc_ms).to_pylist() == slow.column(0).cast(utc_ms).to_pylist()
    assert fast.schema.remove(0) == slow.schema.remove(0)
