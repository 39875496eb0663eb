"""Invalid specs are refused with the JSON path of every bad field.

Needs no infrastructure and no fixtures.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from specs import (
    SpecError,
    load_supervisor_spec,
)
from tests.helpers import example_json


def load_errors(doc: object) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as caught:
        load_supervisor_spec(doc)  # type: ignore[arg-type]
    return caught.value.errors


# --------------------------------------------------------------------------- rejections


def _patched(*steps: Any, value: Any = None, delete: bool = False) -> Callable[[dict[str, Any]], None]:
    def apply(doc: dict[str, Any]) -> None:
        target: Any = doc
        for step in steps[:-1]:
            target = target[step]
        if delete:
            del target[steps[-1]]
        elif isinstance(target, list) and steps[-1] == len(target):
            target.append(value)
        else:
            target[steps[-1]] = value

    return apply


DS = ("spec", "dataSchema")
IO = ("spec", "ioConfig")
TU = ("spec", "tuningConfig")
GS = (*DS, "granularitySpec")
DIMS = (*DS, "dimensionsSpec", "dimensions")
METRICS = (*DS, "metricsSpec")
P_DS = "spec.dataSchema"
P_GS = "spec.dataSchema.granularitySpec"
P_DIMS = "spec.dataSchema.dimensionsSpec.dimensions"

REJECTIONS: list[tuple[str, Callable[[dict[str, Any]], None], str, str]] = [
    # wrong JSON types
    (
        "taskCount-string",
        _patched(*IO, "taskCount", value="1"),
        "spec.ioConfig.taskCount",
        "expected an integer",
    ),
    (
        "taskCount-float",
        _patched(*IO, "taskCount", value=1.5),
        "spec.ioConfig.taskCount",
        "expected an integer",
    ),
    (
        "taskCount-bool",
        _patched(*IO, "taskCount", value=True),
        "spec.ioConfig.taskCount",
        "expected an integer",
    ),
    (
        "earliest-string",
        _patched(*IO, "useEarliestOffset", value="true"),
        "spec.ioConfig.useEarliestOffset",
        "true or false",
    ),
    ("topic-number", _patched(*IO, "topic", value=5), "spec.ioConfig.topic", "expected a string, got number"),
    ("spec-list", _patched("spec", value=[]), "spec", "expected an object, got array"),
    ("dataSchema-string", _patched(*DS, value="x"), P_DS, "expected an object, got string"),
    ("dimensions-object", _patched(*DIMS, value={}), P_DIMS, "expected a list, got object"),
    ("dimension-number", _patched(*DIMS, 2, value=7), f"{P_DIMS}[2]", "got number"),
    ("metricsSpec-string", _patched(*METRICS, value="count"), f"{P_DS}.metricsSpec", "expected a list"),
    ("rollup-string", _patched(*GS, "rollup", value="yes"), f"{P_GS}.rollup", "true or false"),
    (
        "consumer-list",
        _patched(*IO, "consumerProperties", value={"a": [1]}),
        "spec.ioConfig.consumerProperties.a",
        "got array",
    ),
    (
        "consumer-null",
        _patched(*IO, "consumerProperties", value={"bootstrap.servers": None}),
        'spec.ioConfig.consumerProperties["bootstrap.servers"]',
        "got null",
    ),
    ("period-number", _patched(*IO, "period", value=30), "spec.ioConfig.period", "duration string"),
    (
        "maxRows-string",
        _patched(*TU, "maxRowsPerSegment", value="5"),
        "spec.tuningConfig.maxRowsPerSegment",
        "integer",
    ),
    # required / empty
    (
        "missing-topic",
        _patched(*IO, "topic", delete=True),
        "spec.ioConfig.topic",
        "required field is missing",
    ),
    ("empty-topic", _patched(*IO, "topic", value=""), "spec.ioConfig.topic", "must not be empty"),
    ("topic-and-pattern", _patched(*IO, "topicPattern", value="events-.*"), "spec.ioConfig.topic",
     "expected topic or topicPattern, not both"),
    ("pattern-lookahead", lambda doc: doc["spec"]["ioConfig"].update(topic=None, topicPattern="(?!x)events"),
     "spec.ioConfig.topicPattern", "RE2 syntax (no lookaround or backreferences): invalid perl operator"),
    ("missing-ioConfig", _patched(*IO, delete=True), "spec.ioConfig", "required field is missing"),
    ("missing-dataSource", _patched(*DS, "dataSource", delete=True), f"{P_DS}.dataSource", "required"),
    (
        "empty-column",
        _patched(*DS, "timestampSpec", "column", value=""),
        f"{P_DS}.timestampSpec.column",
        "empty",
    ),
    # ranges
    (
        "negative-taskCount",
        _patched(*IO, "taskCount", value=-2),
        "spec.ioConfig.taskCount",
        "must be >= 1, got -2",
    ),
    ("zero-replicas", _patched(*IO, "replicas", value=0), "spec.ioConfig.replicas", "must be >= 1, got 0"),
    (
        "zero-maxRowsPerSegment",
        _patched(*TU, "maxRowsPerSegment", value=0),
        "spec.tuningConfig.maxRowsPerSegment",
        ">= 1",
    ),
    (
        "negative-maxRowsInMemory",
        _patched(*TU, "maxRowsInMemory", value=-1),
        "spec.tuningConfig.maxRowsInMemory",
        ">= 1",
    ),
    (
        "negative-maxParse",
        _patched(*TU, "maxParseExceptions", value=-1),
        "spec.tuningConfig.maxParseExceptions",
        ">= 0",
    ),
    (
        "negative-maxSaved",
        _patched(*TU, "maxSavedParseExceptions", value=-1),
        "spec.tuningConfig.maxSavedParseExceptions",
        ">= 0",
    ),
    # types that are not supported
    ("supervisor-type", _patched("type", value="kinesis"), "type", "expected 'kafka', got 'kinesis'"),
    ("io-type", _patched(*IO, "type", value="kinesis"), "spec.ioConfig.type", "'kafka'"),
    ("tuning-type", _patched(*TU, "type", value="index_parallel"), "spec.tuningConfig.type", "'kafka'"),
    (
        "input-format",
        _patched(*IO, "inputFormat", value={"type": "thrift"}),
        "spec.ioConfig.inputFormat.type",
        "'json'",
    ),
    ("granularitySpec-type", _patched(*GS, "type", value="arbitrary"), f"{P_GS}.type", "'uniform'"),
    (
        "unknown-aggregator",
        _patched(*METRICS, 1, "type", value="doubleMean"),
        f"{P_DS}.metricsSpec[1].type",
        "unknown aggregator type 'doubleMean'",
    ),
    (
        "dimension-json",
        _patched(*DIMS, 2, value={"name": "x", "type": "json"}),
        f"{P_DIMS}[2].type",
        "got 'json'",
    ),
    ("dimension-no-name", _patched(*DIMS, 2, value={"type": "long"}), f"{P_DIMS}[2].name", "required"),
    (
        "bad-timestamp-format",
        _patched(*DS, "timestampSpec", "format", value="yyyy-MM-dd"),
        f"{P_DS}.timestampSpec.format",
        "unsupported timestamp format 'yyyy-MM-dd'",
    ),
    (
        "bad-missingValue",
        _patched(*DS, "timestampSpec", "missingValue", value="soon"),
        f"{P_DS}.timestampSpec.missingValue",
        "not an ISO-8601 timestamp",
    ),
    # aggregator fields
    (
        "sum-without-field",
        _patched(*METRICS, 1, "fieldName", delete=True),
        f"{P_DS}.metricsSpec[1].fieldName",
        "required",
    ),
    (
        "count-with-field",
        _patched(*METRICS, 0, "fieldName", value="x"),
        f"{P_DS}.metricsSpec[0].fieldName",
        "no fieldName",
    ),
    # duplicate and clashing names
    (
        "duplicate-dimension",
        _patched(*DIMS, 2, value="country"),
        f"{P_DIMS}[2].name",
        "duplicate dimension name 'country'",
    ),
    (
        "duplicate-metric",
        _patched(*METRICS, 2, "name", value="value_sum"),
        f"{P_DS}.metricsSpec[2].name",
        "duplicate metric name 'value_sum'",
    ),
    ("dimension-is-timestamp", _patched(*DIMS, 2, value="ts"), f"{P_DIMS}[2].name", "timestamp column"),
    ("dimension-is-metric", _patched(*DIMS, 2, value="price_sum"), f"{P_DIMS}[2].name", "name of a metric"),
    # granularities
    (
        "unknown-granularity",
        _patched(*GS, "segmentGranularity", value="HOURLY"),
        f"{P_GS}.segmentGranularity",
        "unknown granularity 'HOURLY'",
    ),
    (
        "segment-none",
        _patched(*GS, "segmentGranularity", value="none"),
        f"{P_GS}.segmentGranularity",
        "may not be NONE",
    ),
    (
        "combined-period",
        _patched(*GS, "segmentGranularity", value={"type": "period", "period": "P1DT1H"}),
        f"{P_GS}.segmentGranularity.period",
        "combined period 'P1DT1H'",
    ),
    (
        "zero-period",
        _patched(*GS, "queryGranularity", value={"type": "period", "period": "PT0S"}),
        f"{P_GS}.queryGranularity.period",
        "must be positive",
    ),
    (
        "negative-period",
        _patched(*GS, "segmentGranularity", value={"type": "period", "period": "-P1D"}),
        f"{P_GS}.segmentGranularity.period",
        "negative",
    ),
    (
        "time-zone",
        _patched(
            *GS, "queryGranularity", value={"type": "period", "period": "PT1H", "timeZone": "Asia/Tokyo"}
        ),
        f"{P_GS}.queryGranularity.timeZone",
        "only UTC",
    ),
    (
        "origin",
        _patched(
            *GS,
            "segmentGranularity",
            value={"type": "period", "period": "P1D", "origin": "2020-01-01T00:00Z"},
        ),
        f"{P_GS}.segmentGranularity.origin",
        "epoch",
    ),
    (
        "zero-duration",
        _patched(*GS, "segmentGranularity", value={"type": "duration", "duration": 0}),
        f"{P_GS}.segmentGranularity.duration",
        "must be > 0",
    ),
    (
        "granularity-number",
        _patched(*GS, "segmentGranularity", value=3600),
        f"{P_GS}.segmentGranularity",
        "got number",
    ),
    # durations
    (
        "bad-duration",
        _patched(*IO, "taskDuration", value="1 hour"),
        "spec.ioConfig.taskDuration",
        "not an ISO-8601 period",
    ),
    (
        "month-duration",
        _patched(*IO, "taskDuration", value="P1M"),
        "spec.ioConfig.taskDuration",
        "months and years",
    ),
    (
        "zero-duration-task",
        _patched(*IO, "taskDuration", value="PT0S"),
        "spec.ioConfig.taskDuration",
        "positive",
    ),
    (
        "negative-late",
        _patched(*IO, "lateMessageRejectionPeriod", value="PT-1H"),
        "spec.ioConfig.lateMessageRejectionPeriod",
        "negative",
    ),
    (
        "bad-start-date",
        _patched(*IO, "lateMessageRejectionStartDateTime", value="yesterday"),
        "spec.ioConfig.lateMessageRejectionStartDateTime",
        "ISO-8601 timestamp",
    ),
    # dataSource safety
    ("datasource-slash", _patched(*DS, "dataSource", value="a/b"), f"{P_DS}.dataSource", "path component"),
    (
        "datasource-backslash",
        _patched(*DS, "dataSource", value="a\\b"),
        f"{P_DS}.dataSource",
        "path component",
    ),
    ("datasource-dotdot", _patched(*DS, "dataSource", value="a..b"), f"{P_DS}.dataSource", "'..'"),
    (
        "datasource-dot",
        _patched(*DS, "dataSource", value=".hidden"),
        f"{P_DS}.dataSource",
        "must not start with '.'",
    ),
    ("datasource-empty", _patched(*DS, "dataSource", value=""), f"{P_DS}.dataSource", "must not be empty"),
    *((f"datasource-{name}", _patched(*DS, "dataSource", value=f"a{char}b"), f"{P_DS}.dataSource", "not allowed")
      for name, char in [("glob-star", "*"), ("glob-question", "?"), ("glob-bracket", "["), ("glob-brace", "{"),
                         ("backtick", "`"), ("quote", '"'), ("tab", "\t"), ("newline", "\n")]),
    ("datasource-too-long", _patched(*DS, "dataSource", value="x" * 256), f"{P_DS}.dataSource", "at most 255"),
]


@pytest.mark.parametrize(
    ("mutate", "path", "fragment"),
    [pytest.param(mutate, path, fragment, id=name) for name, mutate, path, fragment in REJECTIONS],
)
def test_invalid_values_are_rejected_with_their_path(
    mutate: Callable[[dict[str, Any]], None], path: str, fragment: str
) -> None:
    doc = example_json("events")
    mutate(doc)
    errors = load_errors(doc)
    assert [p for p, _ in errors] == [path], errors
    assert fragment in errors[0][1], errors


def test_error_message_format_is_path_colon_message() -> None:
    doc = example_json("events")
    doc["spec"]["ioConfig"]["taskCount"] = -2
    with pytest.raises(SpecError) as caught:
        load_supervisor_spec(doc)
    assert str(caught.value) == "spec.ioConfig.taskCount: must be >= 1, got -2"
    assert isinstance(caught.value, ValueError)


def test_late_rejection_period_and_start_cannot_be_combined() -> None:
    doc = example_json("events")
    doc["spec"]["ioConfig"]["lateMessageRejectionPeriod"] = "PT1H"
    doc["spec"]["ioConfig"]["lateMessageRejectionStartDateTime"] = "2024-01-01T00:00:00Z"
    assert [p for p, _ in load_errors(doc)] == ["spec.ioConfig.lateMessageRejectionStartDateTime"]


def test_all_problems_are_listed() -> None:
    doc = example_json("events")
    doc["spec"]["ioConfig"]["taskCount"] = -2
    del doc["spec"]["ioConfig"]["topic"]
    doc["spec"]["tuningConfig"]["maxRowsInMemory"] = "many"
    with pytest.raises(SpecError) as caught:
        load_supervisor_spec(doc)
    assert sorted(caught.value.errors) == [
        ("spec.ioConfig.taskCount", "must be >= 1, got -2"),
        ("spec.ioConfig.topic", "required field is missing (or give topicPattern)"),
        ("spec.tuningConfig.maxRowsInMemory", "expected an integer, got string"),
    ]
    text = str(caught.value)
    assert text.startswith("3 problems in supervisor spec:")
    assert "  spec.ioConfig.topic: required field is missing (or give topicPattern)" in text.splitlines()


@pytest.mark.parametrize(
    ("document", "fragment"),
    [
        ("{not json", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        ("[1]", "got array"),
        ("3", "got number"),
    ],
)
def test_bad_documents_are_rejected_at_the_root(document: str | bytes, fragment: str) -> None:
    errors = load_errors(document)
    assert len(errors) == 1
    assert errors[0][0] == "$"
    assert fragment in errors[0][1]


def test_a_nul_character_anywhere_is_refused_naming_its_path() -> None:
    """Found by fuzzing: PostgreSQL cannot store a NUL character in JSON; the submission failed with a 500."""
    doc = example_json("events")
    doc["spec"]["ioConfig"]["topic"] = "a\x00b"
    doc["spec"]["tuningConfig"]["extra\x00key"] = 1
    assert sorted(p for p, _ in load_errors(doc)) == ['spec.ioConfig.topic', 'spec.tuningConfig["extra\\u0000key"]']
