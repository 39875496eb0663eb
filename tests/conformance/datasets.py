"""Druid's small SQL test datasets, as records to produce and the supervisor specs that ingest them.

The rows and schemas are those of Druid's ``TestDataBuilder`` (apache/druid at 04bb5b8821f9,
``sql/src/test/java/org/apache/druid/sql/calcite/util/TestDataBuilder.java``): ``foo`` (ROWS1),
``numfoo`` (ROWS1_WITH_NUMERIC_DIMS) and ``foo2`` (ROWS2), each with rollup off; and ``test_agg_funcs``, the
inline rows of Druid's quidem QA aggregate tests (``sql/src/test/quidem/qatests/qaAggFuncs/ingest.json`` at
c5c204e8bb6b; its CSV's empty fields are Druid's nulls, so missing keys here). Lists are produced as
JSON arrays, as Druid's test rows hold them; a missing key is a missing field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["DATASETS", "Dataset"]

_FOO_ROWS: list[dict[str, Any]] = [
    {"t": "2000-01-01", "m1": "1.0", "m2": "1.0", "dim1": "", "dim2": ["a"], "dim3": ["a", "b"]},
    {"t": "2000-01-02", "m1": "2.0", "m2": "2.0", "dim1": "10.1", "dim2": [], "dim3": ["b", "c"]},
    {"t": "2000-01-03", "m1": "3.0", "m2": "3.0", "dim1": "2", "dim2": [""], "dim3": ["d"]},
    {"t": "2001-01-01", "m1": "4.0", "m2": "4.0", "dim1": "1", "dim2": ["a"], "dim3": [""]},
    {"t": "2001-01-02", "m1": "5.0", "m2": "5.0", "dim1": "def", "dim2": ["abc"], "dim3": []},
    {"t": "2001-01-03", "m1": "6.0", "m2": "6.0", "dim1": "abc"},
]

_NUMERIC: list[dict[str, Any]] = [
    {"d1": 1.0, "f1": 1.0, "l1": 7, "dim4": "a", "dim5": "aa", "dim6": "1"},
    {"d1": 1.7, "d2": 1.7, "f1": 0.1, "f2": 0.1, "l1": 325323, "l2": 325323, "dim4": "a", "dim5": "ab", "dim6": "2"},
    {"d1": 0.0, "d2": 0.0, "f1": 0.0, "f2": 0.0, "l1": 0, "l2": 0, "dim4": "a", "dim5": "ba", "dim6": "3"},
    {"dim4": "b", "dim5": "ad", "dim6": "4"},
    {"dim4": "b", "dim5": "aa", "dim6": "5"},
    {"dim4": "b", "dim5": "ab", "dim6": "6"},
]

_FOO2_ROWS: list[dict[str, Any]] = [
    {"t": "2000-01-01", "dim1": "דרואיד", "dim2": "he", "dim3": 10, "m1": 1.0},
    {"t": "2000-01-01", "dim1": "druid", "dim2": "en", "dim3": 11, "m1": 1.0},
    {"t": "2000-01-01", "dim1": "друид", "dim2": "ru", "dim3": 12, "m1": 1.0},
]

def _agg_funcs_rows() -> list[dict[str, Any]]:
    """Two months of the same nine rows: each of two (long, float, double) triples and a null one, crossed with
    the strings ``AAAAAAAAAA``, ``BBBBBBBBBB`` and null.
    """
    numbers: list[dict[str, Any]] = [
        {"tab0l0": 1111111111, "tab0f0": 11.11111111, "tab0d0": 111.1111111},
        {"tab0l0": 2222222222, "tab0f0": 22.22222222, "tab0d0": 222.2222222},
        {}]
    strings: list[dict[str, Any]] = [{"tab0s0": "AAAAAAAAAA"}, {"tab0s0": "BBBBBBBBBB"}, {}]
    return [{"t": f"{month}T01:01:01.000Z", **number, **string}
            for month in ("2020-01-01", "2020-02-01") for number in numbers for string in strings]


_FOO_METRICS = [
    {"type": "count", "name": "cnt"},
    {"type": "floatSum", "name": "m1", "fieldName": "m1"},
    {"type": "doubleSum", "name": "m2", "fieldName": "m2"},
    {"type": "hyperUnique", "name": "unique_dim1", "fieldName": "dim1"},
]


@dataclass(frozen=True)
class Dataset:
    """One of Druid's test tables: its rows (records to produce) and how Druid's test indexes them."""

    name: str
    rows: list[dict[str, Any]]
    dimensions: list[Any]
    metrics: list[dict[str, Any]]
    segment_granularity: str = "YEAR"

    def spec(self, topic: str) -> dict[str, Any]:
        """The supervisor spec that ingests ``topic`` into the datasource ``name``, as Druid's test index has it."""
        return {"type": "kafka", "spec": {
            "dataSchema": {
                "dataSource": self.name,
                "timestampSpec": {"column": "t", "format": "auto"},
                "dimensionsSpec": {"dimensions": self.dimensions},
                "metricsSpec": self.metrics,
                "granularitySpec": {"segmentGranularity": self.segment_granularity, "queryGranularity": "NONE",
                                    "rollup": False}},
            "ioConfig": {"type": "kafka", "topic": topic, "inputFormat": {"type": "json"},
                         "useEarliestOffset": True, "period": "PT1S"},
            "tuningConfig": {"type": "kafka"}}}


DATASETS = (
    Dataset("foo", _FOO_ROWS, ["dim1", "dim2", "dim3"], _FOO_METRICS),
    Dataset("numfoo", [{**row, **numeric} for row, numeric in zip(_FOO_ROWS, _NUMERIC, strict=True)],
            ["dim1", "dim2", "dim3", "dim4", "dim5", "dim6", {"type": "double", "name": "d1"},
             {"type": "double", "name": "d2"}, {"type": "float", "name": "f1"}, {"type": "float", "name": "f2"},
             {"type": "long", "name": "l1"}, {"type": "long", "name": "l2"}], _FOO_METRICS),
    Dataset("foo2", _FOO2_ROWS, ["dim1", "dim2", {"type": "long", "name": "dim3"}],
            [{"type": "count", "name": "cnt"}, {"type": "longSum", "name": "m1", "fieldName": "m1"},
             {"type": "doubleSum", "name": "m2", "fieldName": "m2"},
             {"type": "hyperUnique", "name": "unique_dim1", "fieldName": "dim1"}]),
    Dataset("test_agg_funcs", _agg_funcs_rows(),
            [{"type": "long", "name": "tab0l0"}, "tab0s0", {"type": "float", "name": "tab0f0"},
             {"type": "double", "name": "tab0d0"}], [], segment_granularity="MONTH"),
)
"""Druid's ``foo``, ``numfoo``, ``foo2`` and ``test_agg_funcs``."""
