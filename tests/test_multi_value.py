"""Multi-value string dimensions: JSON arrays ingested as Druid does, and queried with Druid's semantics."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest

from indexing_task.compaction_job import compact
from indexing_task.rollup import Rollup
from indexing_task.rollup_schema import RollupSchema
from overlord.dev.sample_data import produce
from overlord.query.engine import execute_sql, run_sql
from overlord.query.native import run_native
from overlord.query.query_errors import QueryError
from overlord.query.value_sizes import value_sizes
from overlord.supervisor.task_ranges import index_once
from segment_store.timeline import visible_segments
from specs import SpecError, load_supervisor_spec
from tests.helpers import settings_for
from tests.test_timeline import publish_segments, write_segment


def tags_spec(datasource: str = "tags", topic: str = "tags", handling: str | None = None) -> dict[str, Any]:
    tags: dict[str, Any] = {"name": "tags"} if handling is None else {"name": "tags", "multiValueHandling": handling}
    return {"type": "kafka", "spec": {
        "dataSchema": {
            "dataSource": datasource,
            "timestampSpec": {"column": "t", "format": "iso"},
            "dimensionsSpec": {"dimensions": ["page", tags]},
            "metricsSpec": [{"type": "count", "name": "count"}],
            "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "HOUR"}},
        "ioConfig": {"topic": topic, "inputFormat": {"type": "json"}, "useEarliestOffset": True}}}


def rows(handling: str | None, tags: list[Any]) -> list[tuple[list[Any] | None, int]]:
    """(stored tags, count) of one record per ``tags`` value under ``handling``, sorted."""
    spec = load_supervisor_spec(tags_spec(handling=handling))
    rollup = Rollup(RollupSchema.from_spec(spec.spec.data_schema))
    before = rollup.parse([json.dumps({"t": "2024-05-01T10:00:00Z", "page": "p", "tags": "solo"}).encode()])
    parsed = rollup.parse([json.dumps({"t": "2024-05-01T10:00:00Z", "page": "p", "tags": t}).encode() for t in tags])
    assert parsed.bad_count == 0, parsed.bad_samples
    merged = rollup.merge([before.rows, parsed.rows]).to_pylist()  # a batch from before the first array
    return sorted(((r["tags"], r["count"]) for r in merged), key=repr)


ARRAYS = [["b", "a", "b"], ["a", "b", "b"], "a", ["a"], [], [None], None, ["z", None, 1, True]]


@pytest.mark.parametrize(("handling", "expected"), [
    (None, [(None, 3), (["a"], 2), (["a", "b", "b"], 2), (["solo"], 1), ([None, "1", "true", "z"], 1)]),
    ("sorted_set", [(None, 3), (["a"], 2), (["a", "b"], 2), (["solo"], 1), ([None, "1", "true", "z"], 1)]),
    ("ARRAY", [(None, 3), (["a"], 2), (["a", "b", "b"], 1), (["b", "a", "b"], 1), (["solo"], 1),
               (["z", None, "1", "true"], 1)]),
])
def test_arrays_become_multi_value_rows_as_druid_stores_them(handling, expected):
    """SORTED_ARRAY (default) sorts with nulls first, SORTED_SET drops repeats, ARRAY keeps the order; a value
    and a one-element array are one row; [], [null] and a missing field are a null row.
    """
    assert rows(handling, ARRAYS) == sorted(expected, key=repr)


def test_arrays_of_at_most_one_value_keep_a_dimension_single_valued():
    """As in Druid's ``foo`` test table: ``["a"]`` is "a", ``[]`` and ``[null]`` are null, ``[""]`` is ""; the
    dimension stays a plain string until a record holds two values (a one-element nested array is refused).
    """
    rollup = Rollup(RollupSchema.from_spec(load_supervisor_spec(tags_spec()).spec.data_schema))
    records = [{"t": "2024-05-01T10:00:00Z", "page": str(i), "tags": tags}
               for i, tags in enumerate([["a"], [], [None], [""], "b", None])]
    parsed = rollup.parse([json.dumps(r).encode() for r in records])
    assert parsed.bad_count == 0 and not rollup.schema.dimensions[1].multi_value
    assert sorted((r["page"], r["tags"]) for r in parsed.rows.to_pylist()) == [
        ("0", "a"), ("1", None), ("2", None), ("3", ""), ("4", "b"), ("5", None)]
    nested = rollup.parse([json.dumps({"t": "2024-05-01T10:00:00Z", "tags": [["b"]]}).encode()])
    assert [b.reason for b in nested.bad_samples] == ["a nested array or object in multi-value dimension tags"]


def test_a_nested_array_or_an_unknown_handling_is_refused():
    spec = load_supervisor_spec(tags_spec())
    rollup = Rollup(RollupSchema.from_spec(spec.spec.data_schema))
    parsed = rollup.parse([json.dumps({"t": "2024-05-01T10:00:00Z", "tags": ["a", ["b"]]}).encode()])
    assert [b.reason for b in parsed.bad_samples] == ["a nested array or object in multi-value dimension tags"]
    with pytest.raises(SpecError) as refused:
        load_supervisor_spec(tags_spec(handling="SORTED"))
    [(path, _)] = refused.value.errors
    assert path == "spec.dataSchema.dimensionsSpec.dimensions[1].multiValueHandling"


DRUID_DOCS_ROWS = [["t1", "t2", "t3"], ["t3", "t4", "t5"], ["t5", "t6", "t7"], []]
"""The rows of Druid's multi-value dimension documentation."""


def test_multi_value_dimensions_through_the_broker_query_as_in_druid_and_survive_compaction(
        stack, engine, spark, make_topic, datasource, deep_storage):
    topic = make_topic(1)
    spec = load_supervisor_spec(tags_spec(datasource, topic))
    settings = settings_for(stack, deep_storage)
    batches = [[{"page": "single", "tags": "t3"}, {"page": "single", "tags": "t9"}],  # a segment of strings
               [{"page": f"doc{i}", "tags": tags} for i, tags in enumerate(DRUID_DOCS_ROWS)]]  # one of lists
    for batch in batches:
        produce(stack.bootstrap_servers, topic, [json.dumps({"t": "2024-05-01T10:00:00Z", **r}).encode()
                                                  for r in batch], 1)
        assert index_once(spark, engine, settings, spec).outcome.status == "ok"
    kinds = [s.descriptor.get("complex_columns", {}).get("tags") for s in visible_segments(engine, datasource)]
    assert sorted(kinds, key=str) == [None, "multi_value"]

    def sql(query: str) -> list[dict[str, Any]]:
        return execute_sql(spark, engine, query.format(ds=f'"{datasource}"')).table.to_pylist()

    def answers() -> dict[str, Any]:
        return {
            "grouped": sql('SELECT tags, SUM("count") AS n FROM {ds} GROUP BY tags ORDER BY tags NULLS FIRST'),
            "grouped_lists": sql('SELECT MV_TO_ARRAY(tags) AS tags, SUM("count") AS n FROM {ds} GROUP BY tags '
                                 "ORDER BY tags NULLS FIRST"),  # each group's one value, null too ([null])
            "filtered_then_grouped": sql("SELECT tags, COUNT(*) AS n FROM {ds} WHERE tags = 't3' GROUP BY 1 "
                                         "ORDER BY 1"),
            "matching": sql("SELECT page FROM {ds} WHERE tags IN ('t4', 't9') ORDER BY page"),
            "not_matching": sql("SELECT page FROM {ds} WHERE tags <> 't3' ORDER BY page"),
            "null_rows": sql("SELECT page FROM {ds} WHERE tags IS NULL"),
            "selected": sql("SELECT page, tags FROM {ds} WHERE page IN ('doc0', 'single') ORDER BY page, tags"),
            "functions": sql("SELECT page, MV_LENGTH(tags) AS n, MV_OFFSET(tags, 1) AS second, "
                             "MV_CONTAINS(tags, ARRAY['t1', 't3']) AS both, MV_TO_STRING(tags, '|') AS joined "
                             "FROM {ds} WHERE page IN ('doc0', 'single') ORDER BY page, n"),
            "per_value": sql("SELECT CONCAT(tags, '!') AS t, COUNT(*) AS n FROM {ds} WHERE UPPER(tags) = 'T3' "
                             "GROUP BY 1 ORDER BY 1"),  # Druid maps a scalar function over the values
            "coalesced": sql("SELECT page, COALESCE(tags, 'none') AS t FROM {ds} WHERE page IN ('doc0', 'doc3') "
                             "ORDER BY page"),
        }

    expected = {
        "grouped": [{"tags": None, "n": 1}, *({"tags": t, "n": n} for t, n in [
            ("t1", 1), ("t2", 1), ("t3", 3), ("t4", 1), ("t5", 2), ("t6", 1), ("t7", 1), ("t9", 1)])],
        "filtered_then_grouped": [{"tags": t, "n": n} for t, n in [("t1", 1), ("t2", 1), ("t3", 3), ("t4", 1),
                                                                  ("t5", 1)]],  # whole rows kept, then unnested
        "matching": [{"page": "doc1"}, {"page": "single"}],
        "not_matching": [{"page": "doc2"}, {"page": "single"}],  # no value t3; the null row matches neither
        "null_rows": [{"page": "doc3"}],
        "selected": [{"page": "doc0", "tags": '["t1","t2","t3"]'}, {"page": "single", "tags": "t3"},
                     {"page": "single", "tags": "t9"}],
        "functions": [{"page": "doc0", "n": 3, "second": "t2", "both": True, "joined": "t1|t2|t3"},
                      {"page": "single", "n": 1, "second": None, "both": False, "joined": "t3"},
                      {"page": "single", "n": 1, "second": None, "both": False, "joined": "t9"}],
        "per_value": [{"t": t, "n": n} for t, n in [("t1!", 1), ("t2!", 1), ("t3!", 3), ("t4!", 1), ("t5!", 1)]],
        "coalesced": [{"page": "doc0", "t": '["t1","t2","t3"]'}, {"page": "doc3", "t": "none"}],
    }
    expected["grouped_lists"] = [{"tags": [row["tags"]], "n": row["n"]} for row in expected["grouped"]]
    assert answers() == expected
    native = run_native(spark, engine, {
        "queryType": "groupBy", "dataSource": datasource, "granularity": "all", "intervals": ["2024-05-01/P1D"],
        "dimensions": ["tags"], "filter": {"type": "selector", "dimension": "tags", "value": "t3"},
        "aggregations": [{"type": "count", "name": "n"}]})
    assert sorted((r["event"]["tags"], r["event"]["n"]) for r in native) == [
        (row["tags"], row["n"]) for row in expected["filtered_then_grouped"]]
    assert run_sql(spark, engine, f'SELECT tags FROM "{datasource}" WHERE page = \'doc1\'') == [
        {"tags": '["t3","t4","t5"]'}]
    [scanned] = run_native(spark, engine, {  # a native scan gives a list (Druid SQL gives its JSON text)
        "queryType": "scan", "dataSource": datasource, "intervals": ["2024-05-01/P1D"], "columns": ["page", "tags"],
        "filter": {"type": "in", "dimension": "page", "values": ["doc0", "doc3", "single"]}})
    assert sorted(scanned["events"], key=str) == [{"page": "doc0", "tags": ["t1", "t2", "t3"]},
                                                  {"page": "doc3", "tags": None}, {"page": "single", "tags": "t3"},
                                                  {"page": "single", "tags": "t9"}]
    for refused in ("SELECT COUNT(DISTINCT tags) FROM {ds}", "SELECT MAX(tags) FROM {ds}"):
        with pytest.raises(QueryError, match="multi-value column"):
            sql(refused)
    reports = compact(spark, engine, spec, deep_storage, storage_options=None)
    assert reports and all(r.outcome.ok for r in reports)
    assert [s.descriptor.get("complex_columns") for s in visible_segments(engine, datasource)] == [
        {"tags": "multi_value"}]
    expected["grouped_lists"] = [{"tags": [row["tags"]], "n": row["n"]} for row in expected["grouped"]]
    assert answers() == expected


NUMFOO_DIM3 = [["a", "b"], ["b", "c"], ["d"], [""], None, None]
"""Druid's ``numfoo`` ``dim3`` rows (TestDataBuilder)."""


def publish_lists(engine, root: str, datasource: str, dim3: list[list[str] | None] = NUMFOO_DIM3) -> None:
    """One segment of Druid's ``numfoo`` ``dim2``/``dim3`` values: ``dim3`` a multi-value column, ``dim2`` text."""
    start = datetime(2000, 1, 1, tzinfo=UTC)
    table = pa.table({"__time": pa.array([start] * 6, pa.timestamp("ms", tz="UTC")),
                      "dim2": ["a", None, "", "a", "abc", None], "dim3": dim3, "cnt": [1] * 6})
    segment = write_segment(root, datasource, start, table)
    publish_segments(engine, datasource, replace(segment, details={"complex_columns": {"dim3": "multi_value"}}))


def test_array_functions_take_a_multi_value_column_whole_and_a_text_column_as_one_value(
        spark, engine, datasource, tmp_path):
    """As in Druid's ``CalciteArraysQueryTest``: ``testSomeArrayFunctionsWithScanQuery`` (ARRAY_CONCAT of a text
    and a multi-value column) and ``testArrayToStringToMultiValueString`` (ARRAY_LENGTH of the list compared).
    """
    publish_lists(engine, str(tmp_path), datasource)
    concat = run_sql(spark, engine, f'SELECT dim2, ARRAY_CONCAT(dim2, dim3) FROM "{datasource}" '
                                    "WHERE dim2 = 'a' ORDER BY 2", "array")
    assert concat == [["a", ["a", ""]], ["a", ["a", "a", "b"]]]
    grouped = run_sql(spark, engine, "SELECT STRING_TO_ARRAY(CONCAT(ARRAY_TO_STRING(dim3, ','), ',d'), ','), SUM(cnt) "
                                     f'FROM "{datasource}" WHERE ARRAY_LENGTH(dim3) > 0 GROUP BY 1 ORDER BY 1', "array")
    assert grouped == [[["", "d"], 1], [["a", "b", "d"], 1], [["b", "c", "d"], 1], [["d", "d"], 1]]


def test_array_functions_read_a_text_column_as_a_one_value_array(spark, engine, datasource, tmp_path):
    """Druid's array functions read a scalar as a one-element array (``ExprEval.asArray``): ARRAY_LENGTH of a
    text value is 1 (of null, null), ARRAY_TO_STRING is the value itself, as ARRAY_OFFSET and MV_LENGTH already
    answered. Spark's ``size`` and ``array_join`` of a string fail instead.
    """
    publish_lists(engine, str(tmp_path), datasource)
    got = run_sql(spark, engine, "SELECT dim2, ARRAY_LENGTH(dim2), ARRAY_TO_STRING(dim2, '|'), ARRAY_OFFSET(dim2, 0), "
                                 "MV_LENGTH(dim2), ARRAY_CONTAINS(dim2, 'a'), ARRAY_LENGTH(dim2) > 0 "
                                 f'FROM "{datasource}" ORDER BY 1', "array")
    assert got == [[None, None, None, None, None, None, None], [None, None, None, None, None, None, None],
                   ["", 1, "", "", 1, False, True], ["a", 1, "a", "a", 1, True, True],
                   ["a", 1, "a", "a", 1, True, True], ["abc", 1, "abc", "abc", 1, False, True]]


def test_per_value_concat_is_bounded_by_the_values_stored_and_a_large_value_is_still_refused(
        spark, engine, datasource, tmp_path):
    """As in Druid's ``CalciteMultiValueStringQueryTest#testMultiValueStringWorksLikeStringSelfConcatScan``.

    At the default bound of a column (1 MiB) the JSON text of a per-value CONCAT looked past the value limit;
    the files' footers bound three-letter values, and a value near 1 MiB keeps the query refused.
    """
    publish_lists(engine, str(tmp_path / "small"), datasource)
    query = "SELECT CONCAT(dim3, '-lol-', dim3) FROM \"{}\""
    got = run_sql(spark, engine, query.format(datasource), "array")
    assert sorted(got, key=str) == sorted([['["a-lol-a","b-lol-b"]'], ['["b-lol-b","c-lol-c"]'], ["d-lol-d"],
                                           ["-lol-"], [None], [None]], key=str)
    large = datasource + "_large"
    publish_lists(engine, str(tmp_path / "large"), large, [["x" * 1_000_000, "y"], *NUMFOO_DIM3[1:]])
    [path] = [s.path for s in visible_segments(engine, large)]
    assert value_sizes([path])["dim3"] > 1_000_000
    with pytest.raises(QueryError, match="may build a value of up to") as refused:
        run_sql(spark, engine, query.format(large), "array")
    assert refused.value.error_class == "VALUE_TOO_LARGE"
