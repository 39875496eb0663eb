"""Extraction functions in native queries' dimension specs and filters, on real segments.

Druid's rules are those of docs/querying/dimensionspecs.md (SQL-compatible null handling); each
answer is worked out in Python from the random rows. Druid's own answers over ``foo`` are graded in
``tests/conformance/cases/native.json`` (``*-extraction-*``).
"""

from __future__ import annotations

import math
import re
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from overlord.query.native import run_native
from overlord.query.query_errors import QueryError
from tests.test_timeline import HOUR, T0, publish_hours

NAME = f"native-extraction-{uuid.uuid4().hex[:8]}"
INTERVAL = f"{T0:%Y-%m-%dT%H:%M:%S}Z/{T0 + 3 * HOUR:%Y-%m-%dT%H:%M:%S}Z"
EVENTS = {"type": "longSum", "name": "events", "fieldName": "count"}


@pytest.fixture(scope="module")
def rows(engine, tmp_path_factory) -> list[dict[str, Any]]:
    return publish_hours(engine, str(tmp_path_factory.mktemp("deep")), NAME, 29, 3, 60)


def group_by(spark, engine, dimension: str, extraction: Any, **extra: Any) -> dict[Any, int]:
    """The events per extracted value of ``dimension``."""
    answer = run_native(spark, engine, {
        "queryType": "groupBy", "dataSource": NAME, "intervals": [INTERVAL], "granularity": "all",
        "dimensions": [{"type": "extraction", "dimension": dimension, "outputName": "d", "extractionFn": extraction}],
        "aggregations": [EVENTS], **extra})
    assert len({e["event"]["d"] for e in answer}) == len(answer)
    return {e["event"]["d"]: e["event"]["events"] for e in answer}


def expected(rows: list[dict[str, Any]], dimension: str, function: Callable[[Any], Any]) -> dict[Any, int]:
    out: Counter[Any] = Counter()
    for r in rows:
        out[function(r[dimension])] += r["count"]
    return dict(out)


def _bucket(value: float, size: float, offset: float) -> str:
    bucketed = math.floor((value - offset) / size) * size + offset
    return str(int(bucketed)) if bucketed == int(bucketed) else str(bucketed)


CASES: list[tuple[str, dict[str, Any], Callable[[Any], Any]]] = [
    ("country", {"type": "substring", "index": 0, "length": 1}, lambda v: v[0]),
    ("device", {"type": "substring", "index": 4}, lambda v: v[4:] or None),  # past the end: null
    ("device", {"type": "substring", "index": 6}, lambda v: v[6:] or None),
    ("device", {"type": "strlen"}, lambda v: str(len(v))),
    ("country", {"type": "lower"}, str.lower),
    ("device", {"type": "upper", "locale": "en-US"}, str.upper),
    ("device", {"type": "regex", "expr": "^(.)o(.)"}, lambda v: v[0] if v[1] == "o" else v),  # no match: as is
    ("device", {"type": "regex", "expr": "(.)(b)", "index": 2, "replaceMissingValue": True,
                "replaceMissingValueWith": "none"}, lambda v: "b" if "b" in v[1:] else "none"),
    ("device", {"type": "regex", "expr": "t", "index": 0, "replaceMissingValue": True},
     lambda v: "t" if "t" in v else None),
    ("device", {"type": "partial", "expr": "ta"}, lambda v: v if "ta" in v else None),
    ("device", {"type": "searchQuery", "query": {"type": "insensitive_contains", "value": "OB"}},
     lambda v: v if "ob" in v else None),
    ("country", {"type": "stringFormat", "format": "[%s] 100%%"}, lambda v: f"[{v}] 100%"),
    ("value_max", {"type": "bucket", "size": 250, "offset": 10}, lambda v: _bucket(v, 250, 10)),
    ("value_max", {"type": "bucket"}, lambda v: str(v)),
    ("value_max", {"type": "strlen"}, lambda v: str(len(str(v)))),  # a number's text
    ("value_max", {"type": "regex", "expr": "^-?(\\d)"}, lambda v: str(abs(v))[0]),
    ("__time", {"type": "timeFormat", "format": "HH:mm"}, lambda t: f"{t:%H:%M}"),
    ("__time", {"type": "timeFormat", "format": "EEEE", "timeZone": "UTC", "locale": "en",
                "granularity": "hour"}, lambda t: f"{t:%A}"),
    ("__time", {"type": "timeFormat", "granularity": "hour"}, lambda t: f"{t:%Y-%m-%dT%H}:00:00.000Z"),
    ("__time", {"type": "timeFormat", "granularity": {"type": "period", "period": "PT30M"}, "asMillis": True},
     lambda t: str(int(t.timestamp()) // 1800 * 1800 * 1000)),
    ("__time", {"type": "substring", "index": 11, "length": 2}, lambda t: f"{t:%H}"),  # ISO-8601 text
    ("device", {"type": "cascade", "extractionFns": [{"type": "regex", "expr": "(...)$"}, {"type": "upper"},
                                                      {"type": "stringFormat", "format": "<%s>"}]},
     lambda v: f"<{v[-3:].upper()}>"),
    ("country", {"type": "identity"}, lambda v: v),
]


@pytest.mark.parametrize("dimension, extraction, function", CASES, ids=[
    f"{c[1]['type']}-{i}" for i, c in enumerate(CASES)])
def test_a_group_by_groups_by_the_extracted_value(spark, engine, rows, dimension, extraction, function):
    assert group_by(spark, engine, dimension, extraction) == expected(rows, dimension, function)


def test_a_top_n_ranks_extracted_values(spark, engine, rows):
    [answer] = run_native(spark, engine, {
        "queryType": "topN", "dataSource": NAME, "intervals": [INTERVAL], "granularity": "all", "threshold": 2,
        "metric": "events", "aggregations": [EVENTS],
        "dimension": {"type": "extraction", "dimension": "__time", "outputName": "minute",
                      "extractionFn": {"type": "timeFormat", "format": "mm"}}})
    by_minute = expected(rows, "__time", lambda t: f"{t:%M}")
    top = sorted(by_minute.items(), key=lambda kv: (-kv[1], kv[0]))[:2]
    assert answer["result"] == [{"minute": m, "events": n} for m, n in top]


def test_a_filter_matches_the_extracted_value(spark, engine, rows):
    """A filter's ``extractionFn`` applies before the match (docs/querying/filters.md)."""
    def events(condition: dict[str, Any]) -> Any:
        [answer] = run_native(spark, engine, {
            "queryType": "timeseries", "dataSource": NAME, "intervals": [INTERVAL], "granularity": "all",
            "aggregations": [EVENTS], "filter": condition})
        return answer["result"]["events"]

    first = {"type": "substring", "index": 0, "length": 1}
    assert events({"type": "selector", "dimension": "device", "value": "m", "extractionFn": first}) == sum(
        r["count"] for r in rows if r["device"] == "mobile")
    assert events({"type": "in", "dimension": "country", "values": ["de", "fr"],
                   "extractionFn": {"type": "lower"}}) == sum(r["count"] for r in rows if r["country"] in ("DE", "FR"))
    assert events({"type": "bound", "dimension": "__time", "lower": "01", "upper": "01", "extractionFn": {
        "type": "timeFormat", "format": "HH"}}) == sum(r["count"] for r in rows if r["__time"].hour == 1)
    assert events({"type": "not", "field": {"type": "selector", "dimension": "device", "value": None,
                                            "extractionFn": {"type": "partial", "expr": "^t"}}}) == sum(
        r["count"] for r in rows if re.match("t", r["device"]))


@pytest.mark.parametrize("extraction, path", [
    ({"type": "javascript", "function": "function(x) { return x; }"}, "$.dimensions[0].extractionFn.type"),
    ({"type": "registeredLookup", "lookup": "countries"}, "$.dimensions[0].extractionFn.type"),
    ({"type": "lookup", "lookup": {"type": "map", "map": {"DE": "Germany"}}}, "$.dimensions[0].extractionFn.type"),
    ({"type": "cascade", "extractionFns": [{"type": "upper"}, {"type": "javascript", "function": "f"}]},
     "$.dimensions[0].extractionFn.extractionFns[1].type"),
    ({"type": "stringFormat", "format": "%d items"}, "$.dimensions[0].extractionFn.format"),
    ({"type": "timeFormat", "format": "HH", "timeZone": "Europe/Berlin"}, "$.dimensions[0].extractionFn.timeZone"),
    ({"type": "timeFormat", "format": "EEEE", "locale": "fr"}, "$.dimensions[0].extractionFn.locale"),
    ({"type": "timeFormat", "format": "xxxx-ww"}, "$.dimensions[0].extractionFn.format"),  # Joda's week year
    ({"type": "timeFormat", "format": "Y"}, "$.dimensions[0].extractionFn.format"),
    ({"type": "regex", "expr": "(a"}, "$.dimensions[0].extractionFn.expr"),
    ({"type": "substring"}, "$.dimensions[0].extractionFn.index"),
    ({"type": "upper", "typo": 1}, "$.dimensions[0].extractionFn.typo"),
    (None, "$.dimensions[0].extractionFn"),
])
def test_an_extraction_we_cannot_answer_is_a_400_naming_its_path(spark, engine, rows, extraction, path):
    with pytest.raises(QueryError) as refused:
        group_by(spark, engine, "country", extraction)
    assert refused.value.status == 400 and refused.value.message.startswith(f"{path}: "), refused.value.message


def test_a_filters_extraction_we_cannot_answer_is_a_400_naming_its_path(spark, engine, rows):
    with pytest.raises(QueryError) as refused:
        run_native(spark, engine, {
            "queryType": "timeseries", "dataSource": NAME, "intervals": [INTERVAL], "granularity": "all",
            "aggregations": [EVENTS], "filter": {"type": "and", "fields": [{
                "type": "selector", "dimension": "country", "value": "x",
                "extractionFn": {"type": "javascript", "function": "f"}}]}})
    assert refused.value.message.startswith("$.filter.fields[0].extractionFn.type: "), refused.value.message


def test_an_extraction_dimensions_output_type_converts_its_values(spark, engine, rows):
    """``outputType`` LONG turns the extracted text into numbers, as Druid SQL's FLOOR(__time TO HOUR) plan asks."""
    answer = run_native(spark, engine, {
        "queryType": "groupBy", "dataSource": NAME, "intervals": [INTERVAL], "granularity": "all",
        "dimensions": [{"type": "extraction", "dimension": "__time", "outputName": "hour", "outputType": "LONG",
                        "extractionFn": {"type": "timeFormat", "granularity": "hour", "asMillis": True}},
                       {"type": "extraction", "dimension": "value_max", "outputName": "bucket",
                        "outputType": "DOUBLE", "extractionFn": {"type": "bucket", "size": 500}}],
        "aggregations": [EVENTS]})
    wanted: Counter[tuple[int, float]] = Counter()
    for r in rows:
        wanted[int(r["__time"].replace(minute=0).timestamp() * 1000), float(r["value_max"] // 500 * 500)] += r["count"]
    assert {(e["event"]["hour"], e["event"]["bucket"]): e["event"]["events"] for e in answer} == dict(wanted)
    assert all(isinstance(e["event"]["hour"], int) and isinstance(e["event"]["bucket"], float) for e in answer)
