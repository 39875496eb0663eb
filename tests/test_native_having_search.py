"""Native groupBy ``having`` specs and ``search`` queries on real segments, with Druid's semantics.

Druid's own answers over its ``foo`` table are graded in ``tests/conformance/cases/native.json``
(``groupby-having-*``, ``search-*``); here the same features over random rows, worked out in Python
from the rows and Druid's documented rules, and the 400s naming the field of a spec we cannot answer.
"""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import datetime
from typing import Any

import pytest

from overlord.query.native import run_native
from overlord.query.query_errors import QueryError
from tests.test_timeline import HOUR, T0, publish_hours

NAME = f"native-{uuid.uuid4().hex[:8]}"
INTERVAL = f"{T0:%Y-%m-%dT%H:%M:%S}Z/{T0 + 3 * HOUR:%Y-%m-%dT%H:%M:%S}Z"
EVENTS = {"type": "longSum", "name": "events", "fieldName": "count"}
MOBILE = {"type": "filtered", "filter": {"type": "selector", "dimension": "device", "value": "mobile"},
          "aggregator": {"type": "longSum", "name": "mobile", "fieldName": "count"}}
PER_ROW = {"type": "arithmetic", "name": "per_row", "fn": "/", "fields": [
    {"type": "fieldAccess", "fieldName": "events"}, {"type": "fieldAccess", "fieldName": "rows"}]}


@pytest.fixture(scope="module")
def rows(engine, tmp_path_factory) -> list[dict[str, Any]]:
    return publish_hours(engine, str(tmp_path_factory.mktemp("deep")), NAME, 23, 3, 70)


def group_by(spark, engine, having: Any, **extra: Any) -> list[dict[str, Any]]:
    return run_native(spark, engine, {
        "queryType": "groupBy", "dataSource": NAME, "intervals": [INTERVAL], "granularity": "all",
        "dimensions": ["country", {"type": "default", "dimension": "device", "outputName": "d"}],
        "aggregations": [EVENTS, {"type": "count", "name": "rows"}, MOBILE], "postAggregations": [PER_ROW],
        "having": having, **extra})


def groups(rows: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Each (country, device)'s events, rows, mobile events (null where none: SQL-compatible) and events per row."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        g = out.setdefault((r["country"], r["device"]), {"events": 0, "rows": 0, "mobile": None})
        g["events"] += r["count"]
        g["rows"] += 1
        if r["device"] == "mobile":
            g["mobile"] = (g["mobile"] or 0) + r["count"]
    for g in out.values():
        g["per_row"] = g["events"] / g["rows"]
    return out


def kept(answer: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(e["event"]["country"], e["event"]["d"]) for e in answer}


def test_having_keeps_the_groups_druid_keeps(spark, engine, rows):
    by_group = groups(rows)
    median = sorted(g["events"] for g in by_group.values())[len(by_group) // 2]
    cases = [  # (having, the groups Druid keeps)
        ({"type": "greaterThan", "aggregation": "events", "value": median},
         {k for k, g in by_group.items() if g["events"] > median}),
        ({"type": "equalTo", "aggregation": "events", "value": float(median)},  # a double equal to a long
         {k for k, g in by_group.items() if g["events"] == median}),
        ({"type": "lessThan", "aggregation": "per_row", "value": 3},  # a post-aggregator's name
         {k for k, g in by_group.items() if g["per_row"] < 3}),
        # a null metric is neither greater nor less than anything; "not" keeps it (GreaterThanHavingSpec#eval)
        ({"type": "greaterThan", "aggregation": "mobile", "value": -1}, {k for k in by_group if k[1] == "mobile"}),
        ({"type": "not", "havingSpec": {"type": "lessThan", "aggregation": "mobile", "value": 10 ** 6}},
         {k for k in by_group if k[1] != "mobile"}),
        ({"type": "greaterThan", "aggregation": "no_such_metric", "value": -1}, set()),
        ({"type": "and", "havingSpecs": [
            {"type": "dimSelector", "dimension": "d", "value": "tablet"},
            {"type": "or", "havingSpecs": [{"type": "greaterThan", "aggregation": "rows", "value": 12},
                                           {"type": "filter", "filter": {"type": "in", "dimension": "country",
                                                                         "values": ["DE", "JP"]}}]}]},
         {k for k, g in by_group.items() if k[1] == "tablet" and (g["rows"] > 12 or k[0] in ("DE", "JP"))}),
        ({"type": "filter", "filter": {"type": "bound", "dimension": "events", "lower": str(median),
                                       "ordering": "numeric"}},  # a filter over an aggregator's name
         {k for k, g in by_group.items() if g["events"] >= median}),
        ({"type": "filter", "filter": {"type": "interval", "dimension": "__time", "intervals": [INTERVAL]}},
         set(by_group)),  # the result row's time
        ({"type": "filter", "filter": {"type": "not", "field": {"type": "null", "column": "mobile"}}},
         {k for k in by_group if k[1] == "mobile"}),
        ({"type": "always"}, set(by_group)),
        ({"type": "never"}, set()),
    ]
    for having, expected in cases:
        answer = group_by(spark, engine, having)
        assert kept(answer) == expected, having
        for event in (e["event"] for e in answer):  # the rows kept are whole, and nothing else is added
            assert event == {"country": event["country"], "d": event["d"],
                             **by_group[(event["country"], event["d"])]}
    assert 0 < len(kept(group_by(spark, engine, cases[0][0]))) < len(by_group)


def test_having_runs_before_the_limit_as_in_druid(spark, engine, rows):
    by_group = groups(rows)
    answer = group_by(spark, engine, {"type": "dimSelector", "dimension": "country", "value": "FR"},
                      limitSpec={"type": "default", "limit": 2,
                                 "columns": [{"dimension": "events", "direction": "descending"}]})
    expected = sorted((g["events"] for k, g in by_group.items() if k[0] == "FR"), reverse=True)[:2]
    assert [e["event"]["events"] for e in answer] == expected


@pytest.mark.parametrize("having, path", [
    ({"type": "greaterThen", "aggregation": "events", "value": 1}, "$.having.type"),
    ({"type": "greaterThan", "value": 1}, "$.having.aggregation"),
    ({"type": "greaterThan", "aggregation": "events", "value": "1"}, "$.having.value"),
    ({"type": "greaterThan", "aggregation": "events", "value": True}, "$.having.value"),
    ({"type": "or", "havingSpecs": [{"type": "always"}, {"type": "lessThan", "value": 1}]},
     "$.having.havingSpecs[1].aggregation"),
    ({"type": "and", "havingSpecs": {"type": "always"}}, "$.having.havingSpecs"),
    ({"type": "not", "havingSpec": {"type": "filter", "filter": {"type": "javascript"}}},
     "$.having.havingSpec.filter.type"),
    ({"type": "filter", "filter": {"type": "selector", "dimension": "per_row", "value": "2"}}, "$.having.filter"),
    ({"type": "dimSelector", "dimension": "d", "value": "x", "extractionFn": {"type": "upper"}},
     "$.having.extractionFn"),
    ({"type": "equalTo", "aggregation": "events", "value": 1, "typo": 2}, "$.having.typo"),
    ("events > 1", "$.having"),
])
def test_a_having_spec_we_cannot_answer_is_a_400_naming_its_path(spark, engine, rows, having, path):
    with pytest.raises(QueryError) as refused:
        group_by(spark, engine, having)
    assert refused.value.status == 400 and refused.value.message.startswith(f"{path}: "), refused.value.message


def search(spark, engine, **fields: Any) -> list[dict[str, Any]]:
    return run_native(spark, engine, {"queryType": "search", "dataSource": NAME, "intervals": [INTERVAL], **fields})


def hits(rows: list[dict[str, Any]], dimensions: list[str], match: Any) -> Counter[tuple[str, str]]:
    """(dimension, value) -> the rows holding that value, for the values that match."""
    return Counter((d, r[d]) for r in rows for d in dimensions if match(r[d]))


def test_search_finds_values_counts_rows_and_sorts_as_druid_does(spark, engine, rows):
    found = hits(rows, ["country", "device"], lambda v: "e" in v.lower())
    [answer] = search(spark, engine, granularity="all", searchDimensions=["country", "device"],
                      query={"type": "insensitive_contains", "value": "E"})
    assert answer["timestamp"] == f"{T0:%Y-%m-%dT%H:%M:%S}.000Z"
    expected = sorted(found.items(), key=lambda kv: (kv[0][1], kv[0][0]))  # by value, then dimension
    assert answer["result"] == [{"dimension": d, "value": v, "count": n} for (d, v), n in expected]

    [strlen] = search(spark, engine, granularity="all", searchDimensions=["country", "device"], limit=1,
                      query={"type": "fragment", "values": ["E", "t"]}, sort={"type": "strlen"})
    found = hits(rows, ["country", "device"], lambda v: "e" in v.lower() and "t" in v.lower())
    expected = sorted(found.items(), key=lambda kv: (len(kv[0][1]), kv[0][1], kv[0][0]))[:1]
    assert strlen["result"] == [{"dimension": d, "value": v, "count": n} for (d, v), n in expected]

    hourly = search(spark, engine, granularity="hour", searchDimensions=["device"],
                    query={"type": "contains", "value": "Mob", "caseSensitive": True})
    assert hourly == []  # case-sensitive: "mobile" does not contain "Mob"
    hourly = search(spark, engine, granularity="hour", searchDimensions=["device"],
                    query={"type": "contains", "value": "mob"}, filter={"type": "selector", "dimension": "country",
                                                                        "value": "GB"})
    per_hour: Counter[datetime] = Counter(r["__time"].replace(minute=0) for r in rows
                                          if r["device"] == "mobile" and r["country"] == "GB")
    assert hourly == [{"timestamp": f"{h:%Y-%m-%dT%H:%M:%S}.000Z",
                       "result": [{"dimension": "device", "value": "mobile", "count": n}]}
                      for h, n in sorted(per_hour.items())]

    every = search(spark, engine, granularity="all", query={"type": "regex", "pattern": "^(U|ta)"})
    found = hits(rows, ["country", "device"], lambda v: v.startswith(("U", "ta")))
    assert [(h["dimension"], h["value"], h["count"]) for h in every[0]["result"]] == sorted(
        ((d, v, n) for (d, v), n in found.items()), key=lambda t: (t[1], t[0]))  # every string dimension


def test_search_reads_a_numeric_dimension_as_text_and_a_missing_one_as_no_values(spark, engine, rows):
    """As Druid: SearchQueryRunnerTest#testSearchWithNotExistedDimension answers no hits."""
    assert search(spark, engine, granularity="all", searchDimensions=["no_such_dimension"]) == []
    [answer] = search(spark, engine, granularity="all", searchDimensions=["value_max", "no_such_dimension"],
                      query={"type": "contains", "value": "99"}, sort={"type": "numeric"})
    found = Counter(str(r["value_max"]) for r in rows if "99" in str(r["value_max"]))
    assert answer["result"] == [{"dimension": "value_max", "value": v, "count": n}
                                for v, n in sorted(found.items(), key=lambda kv: int(kv[0]))] and found


def test_search_sorts_numbers_after_words_as_druids_numeric_order():
    from overlord.query.native_search import sort_key

    values = ["10", "b", "9", "1e1", "a", "-2.5", ".5"]
    assert sorted(values, key=sort_key("numeric", "$.sort")) == ["a", "b", "-2.5", ".5", "9", "10", "1e1"]
    assert sorted(values, key=sort_key("strlen", "$.sort")) == ["9", "a", "b", ".5", "10", "1e1", "-2.5"]


@pytest.mark.parametrize("fields, path", [
    ({"query": {"type": "wildcard", "value": "a"}}, "$.query.type"),
    ({"query": {"type": "contains", "value": "a", "case_sensitive": True}}, "$.query.case_sensitive"),
    ({"query": {"type": "contains"}}, "$.query.value"),
    ({"query": {"type": "fragment", "values": "ab"}}, "$.query.values"),
    ({"query": {"type": "contains", "value": "a"}, "sort": {"type": "version"}}, "$.sort.type"),
    ({"query": {"type": "contains", "value": "a"}, "limit": "10"}, "$.limit"),
    ({"query": {"type": "contains", "value": "a"}, "searchDimensions": "country"}, "$.searchDimensions"),
    ({"query": {"type": "contains", "value": "a"}, "searchDimensions": [{"type": "extraction", "dimension": "x"}]},
     "$.searchDimensions[0]"),
    ({"query": {"type": "regex", "pattern": "(a"}}, "$.query.pattern"),
])
def test_a_search_we_cannot_answer_is_a_400_naming_its_path(spark, engine, rows, fields, path):
    with pytest.raises(QueryError) as refused:
        search(spark, engine, granularity="all", **fields)
    assert refused.value.status == 400 and refused.value.message.startswith(f"{path}: "), refused.value.message


def test_a_search_filter_matches_as_the_search_query_does(spark, engine, rows):
    """Druid's ``search`` filter takes the search query specs: a row matches when its value does."""
    def events(query: dict[str, Any]) -> Any:
        [answer] = run_native(spark, engine, {
            "queryType": "timeseries", "dataSource": NAME, "intervals": [INTERVAL], "granularity": "all",
            "aggregations": [EVENTS], "filter": {"type": "search", "dimension": "device", "query": query}})
        return answer["result"]["events"]

    def expected(match: Any) -> int:
        return sum(r["count"] for r in rows if match(r["device"]))

    assert events({"type": "insensitive_contains", "value": "OB"}) == expected(lambda d: "ob" in d)
    assert events({"type": "contains", "value": "OB", "caseSensitive": True}) is None  # no row: a null sum
    assert events({"type": "fragment", "values": ["T", "a"]}) == expected(lambda d: "t" in d and "a" in d)
    assert events({"type": "contains", "value": "%"}) is None  # a LIKE wildcard is a plain character here
