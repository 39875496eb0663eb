"""Expression virtual columns and aggregators' ``expression`` inputs in native queries, on real segments.

Druid's rules are docs/querying/virtual-columns.md, docs/querying/aggregations.md (an ``expression``
instead of a ``fieldName``) and docs/querying/math-expr.md (typing: a LONG divided by a LONG is a
whole number; ``+`` with a string concatenates; comparisons give 1 or 0); each answer is worked
out in Python from the random rows.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest

from overlord.query.native import run_native
from overlord.query.query_errors import QueryError
from tests.test_timeline import HOUR, T0, publish_hours

NAME = f"native-virtual-{uuid.uuid4().hex[:8]}"
INTERVAL = f"{T0:%Y-%m-%dT%H:%M:%S}Z/{T0 + 2 * HOUR:%Y-%m-%dT%H:%M:%S}Z"


@pytest.fixture(scope="module")
def rows(engine, tmp_path_factory) -> list[dict[str, Any]]:
    return publish_hours(engine, str(tmp_path_factory.mktemp("deep")), NAME, 31, 2, 40)


def query(spark, engine, kind: str, **fields: Any) -> list[dict[str, Any]]:
    return run_native(spark, engine, {"queryType": kind, "dataSource": NAME, "intervals": [INTERVAL], **fields})


def virtual(name: str, expression: str, output_type: str | None = None) -> dict[str, Any]:
    spec = {"type": "expression", "name": name, "expression": expression}
    return spec | ({"outputType": output_type} if output_type else {})


def test_a_scan_reads_virtual_columns_and_filters_on_them(spark, engine, rows):
    [answer] = query(spark, engine, "scan", columns=["country", "label", "double_count", "tenfold", "ratio"],
                     order="ascending", virtualColumns=[
                         virtual("label", "concat(country, '-', upper(substring(device, 0, 3)))"),
                         virtual("tenfold", "double_count * 5"),  # a virtual column reading another
                         virtual("double_count", "count * 2", "LONG"),
                         virtual("ratio", "value_max / count")],  # two LONGs: a whole division
                     filter={"type": "selector", "dimension": "label", "value": "DE-MOB"})
    wanted = sorted((r for r in rows if r["country"] == "DE" and r["device"] == "mobile"), key=lambda r: r["__time"])
    assert [(e["label"], e["double_count"], e["tenfold"], e["ratio"]) for e in answer["events"]] == [
        ("DE-MOB", 2 * r["count"], 10 * r["count"], int(r["value_max"] / r["count"])) for r in wanted]
    assert answer["columns"] == ["country", "label", "double_count", "tenfold", "ratio"]


def test_aggregators_read_expressions(spark, engine, rows):
    [answer] = query(spark, engine, "timeseries", granularity="all", aggregations=[
        {"type": "longSum", "name": "doubled", "expression": "count * 2"},
        {"type": "longSum", "name": "big", "expression": "count > 3"},  # 1 where true, 0 where not
        {"type": "longSum", "name": "digits", "expression": "STRLEN(CAST(count * 10, 'STRING'))"},  # any case
        {"type": "doubleSum", "name": "spread", "expression": "value_max - value_min + 0.5"},
        {"type": "longMax", "name": "longest", "expression": "strlen(country + device)"},  # + concatenates
        {"type": "doubleMin", "name": "least", "expression": "if(value_min < 0, -1.0, value_min / 2.0)"},
        {"type": "filtered", "filter": {"type": "selector", "dimension": "device", "value": "tablet"},
         "aggregator": {"type": "longSum", "name": "tablet_big", "expression": "case_searched(count >= 4, 1, 0)"}}])
    result = answer["result"]
    assert result["doubled"] == 2 * sum(r["count"] for r in rows)
    assert result["big"] == sum(r["count"] > 3 for r in rows)
    assert result["digits"] == sum(len(str(r["count"] * 10)) for r in rows)
    assert result["spread"] == pytest.approx(sum(r["value_max"] - r["value_min"] + 0.5 for r in rows))
    assert result["longest"] == max(len(r["country"] + r["device"]) for r in rows)
    assert result["least"] == min(-1.0 if r["value_min"] < 0 else r["value_min"] / 2 for r in rows)
    assert result["tablet_big"] == sum(r["count"] >= 4 for r in rows if r["device"] == "tablet")


def test_a_group_by_and_a_top_n_group_by_virtual_columns(spark, engine, rows):
    columns = [virtual("hour", "timestamp_floor(__time, 'PT1H')", "LONG"), virtual("short", "substring(device, 0, 1)")]
    answer = query(spark, engine, "groupBy", granularity="all", virtualColumns=columns, dimensions=["short"],
                   aggregations=[{"type": "longSum", "name": "events", "fieldName": "count"}])
    expected = Counter[str]()
    for r in rows:
        expected[r["device"][0]] += r["count"]
    assert {e["event"]["short"]: e["event"]["events"] for e in answer} == dict(expected)

    [top] = query(spark, engine, "topN", granularity="all", virtualColumns=columns, threshold=5, metric="rows",
                  dimension="hour", aggregations=[{"type": "count", "name": "rows"}])
    per_hour = Counter(str(int(r["__time"].replace(minute=0).timestamp() * 1000)) for r in rows)
    assert sorted((str(e["hour"]), e["rows"]) for e in top["result"]) == sorted(per_hour.items())


@pytest.mark.parametrize("fields, path", [
    ({"virtualColumns": [{"type": "mv-filtered", "name": "v"}]}, "$.virtualColumns[0].type"),
    ({"virtualColumns": [virtual("v", "count +")]}, "$.virtualColumns[0].expression"),
    ({"virtualColumns": [virtual("v", "javascript('x')")]}, "$.virtualColumns[0].expression"),
    ({"virtualColumns": [virtual("v", "count", "COMPLEX")]}, "$.virtualColumns[0].outputType"),
    ({"virtualColumns": [virtual("v", "count"), virtual("v", "count")]}, "$.virtualColumns[1].name"),
    ({"virtualColumns": [virtual("a", "b + 1"), virtual("b", "a + 1")]}, "$.virtualColumns"),
    ({"virtualColumns": {"name": "v"}}, "$.virtualColumns"),
    ({"aggregations": [{"type": "longSum", "name": "s", "fieldName": "count", "expression": "count"}]},
     "$.aggregations[0].expression"),
    ({"aggregations": [{"type": "longSum", "name": "s", "expression": "count +* 1"}]}, "$.aggregations[0].expression"),
])
def test_an_expression_we_cannot_answer_is_a_400_naming_its_path(spark, engine, rows, fields, path):
    with pytest.raises(QueryError) as refused:
        query(spark, engine, "timeseries", granularity="all",
              **({"aggregations": [{"type": "count", "name": "rows"}]} | fields))
    assert refused.value.status == 400 and refused.value.message.startswith(f"{path}: "), refused.value.message


def test_an_expression_post_aggregator_computes_on_the_result_row(spark, engine, rows):
    post = [{"type": "expression", "name": "per_row", "expression": "events / rows"},  # two LONGs: whole
            {"type": "expression", "name": "share", "expression": "events * 1.0 / rows"},
            {"type": "expression", "name": "label", "expression": "concat(country, ':', events)"},
            {"type": "expression", "name": "busy", "expression": "per_row >= 3 && rows > 1"},
            {"type": "expression", "name": "safe", "expression": "events / (rows - rows)"}]  # by zero: null
    answer = query(spark, engine, "groupBy", granularity="all", dimensions=["country"], postAggregations=post,
                   aggregations=[{"type": "longSum", "name": "events", "fieldName": "count"},
                                 {"type": "count", "name": "rows"}])
    for event in (e["event"] for e in answer):
        events, count = event["events"], event["rows"]
        assert event["per_row"] == events // count and event["share"] == pytest.approx(events / count)
        assert event["label"] == f"{event['country']}:{events}" and event["safe"] is None
        assert event["busy"] == int(events // count >= 3 and count > 1)
    assert len(answer) == len({r["country"] for r in rows})


@pytest.mark.parametrize("expression", ["nope * 2", "timestamp_floor(events, 'P1D')", "events +"])
def test_an_expression_post_aggregator_we_cannot_answer_is_a_400_at_its_expression(spark, engine, rows, expression):
    with pytest.raises(QueryError) as refused:
        query(spark, engine, "timeseries", granularity="all", aggregations=[{"type": "count", "name": "events"}],
              postAggregations=[{"type": "expression", "name": "x", "expression": expression}])
    assert refused.value.message.startswith("$.postAggregations[0].expression: "), refused.value.message
