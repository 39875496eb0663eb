"""Tests of the ``specs`` package: loading, ignored fields, errors, granularities, durations.

Needs no infrastructure and no fixtures.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import ValidationError

from specs import (
    EXAMPLES_DIR,
    UNLIMITED_PARSE_EXCEPTIONS,
    DimensionSpec,
    Granularity,
    KafkaSupervisorIngestionSpec,
    MetricSpec,
    SpecError,
    SupervisorSpec,
    format_iso_duration,
    load_example,
    load_supervisor_spec,
    parse_iso_duration,
)


def example_json(name: str) -> dict[str, Any]:
    with open(EXAMPLES_DIR / f"{name}.json", encoding="utf-8") as handle:
        loaded: dict[str, Any] = json.load(handle)
    return loaded


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, micro: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)


def load_errors(doc: object) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as caught:
        load_supervisor_spec(doc)  # type: ignore[arg-type]
    return caught.value.errors


# --------------------------------------------------------------------------- examples


def test_wikipedia_example_loads_as_druid_tutorial_describes_it() -> None:
    spec = load_example("wikipedia")
    assert spec.type == "kafka"
    assert spec.id == spec.datasource == "wikipedia"
    schema = spec.spec.data_schema
    assert schema.timestamp_spec.column == "time"
    assert schema.timestamp_spec.format == "auto"
    assert len(schema.dimensions_spec.dimensions) == 19
    assert schema.dimensions_spec.dimensions[0] == DimensionSpec(name="channel", type="string")
    assert [d.name for d in schema.dimensions_spec.dimensions if d.type == "long"] == [
        "added",
        "deleted",
        "delta",
    ]
    assert schema.metrics_spec == ()
    assert schema.granularity_spec.segment_granularity == Granularity.parse("DAY")
    assert schema.granularity_spec.query_granularity.kind == "none"
    assert schema.granularity_spec.rollup is False
    io = spec.spec.io_config
    assert io.topic == "wikipedia"
    assert io.replicas == 2
    assert io.task_count == 1
    assert io.task_duration == timedelta(minutes=10)
    assert io.completion_timeout == timedelta(minutes=20)
    assert io.consumer_properties == {"bootstrap.servers": "localhost:9092"}
    assert io.input_format.type == "json"
    assert io.use_earliest_offset is False
    tuning = spec.spec.tuning_config
    assert tuning.report_parse_exceptions is False
    assert tuning.max_parse_exceptions == UNLIMITED_PARSE_EXCEPTIONS
    # Every field of the tutorial spec is modelled, so nothing is ignored.
    assert spec.ignored_fields == []


def test_events_example_loads() -> None:
    spec = load_example("events")
    assert spec.id == "events"
    schema = spec.spec.data_schema
    assert (schema.timestamp_spec.column, schema.timestamp_spec.format) == ("ts", "iso")
    assert schema.dimensions_spec.names == ["country", "device"]
    metrics = [(m.type, m.name, m.field_name, m.kind, m.output_type) for m in schema.metrics_spec]
    assert metrics == [
        ("count", "count", None, "count", "long"),
        ("longSum", "value_sum", "value", "sum", "long"),
        ("longMin", "value_min", "value", "min", "long"),
        ("longMax", "value_max", "value", "max", "long"),
        ("doubleSum", "price_sum", "price", "sum", "double"),
    ]
    granularity = schema.granularity_spec
    assert (granularity.segment_granularity.name, granularity.query_granularity.name) == ("HOUR", "MINUTE")
    assert granularity.rollup is True
    io = spec.spec.io_config
    assert (io.topic, io.use_earliest_offset, io.task_count, io.period) == (
        "events",
        True,
        1,
        timedelta(seconds=5),
    )
    assert io.consumer_properties == {}
    assert spec.ignored_fields == []


def test_wikipedia_with_druid_only_fields_reports_them_as_ignored() -> None:
    doc = example_json("wikipedia")
    inner = doc["spec"]
    inner["tuningConfig"]["intermediatePersistPeriod"] = "PT10M"
    inner["ioConfig"]["pollTimeout"] = 100
    inner["dataSchema"]["transformSpec"] = {"transforms": []}
    inner["dataSchema"]["granularitySpec"]["intervals"] = ["2015-09-12/2015-09-13"]
    inner["dataSchema"]["dimensionsSpec"]["dimensions"][16]["createBitmapIndex"] = True
    inner["dataSchema"]["dimensionsSpec"]["spatialDimensions"] = []
    inner["ioConfig"]["inputFormat"]["flattenSpec"] = {"useFieldDiscovery": True}
    doc["context"] = {"taskLockType": "APPEND"}
    doc["suspended"] = False
    spec = load_supervisor_spec(doc)
    assert spec.ignored_fields == [
        "spec.dataSchema.dimensionsSpec.dimensions[16].createBitmapIndex",
        "spec.dataSchema.dimensionsSpec.spatialDimensions",
        "spec.dataSchema.granularitySpec.intervals",
        "spec.dataSchema.transformSpec",
        "spec.ioConfig.inputFormat.flattenSpec",
        "spec.ioConfig.pollTimeout",
        "spec.tuningConfig.intermediatePersistPeriod",
        "context",
        "suspended",
    ]
    # The modelled values are unchanged by the extra fields.
    plain = load_example("wikipedia")
    assert spec.spec.data_schema.dimensions_spec.names == plain.spec.data_schema.dimensions_spec.names
    io, plain_io = spec.spec.io_config, plain.spec.io_config
    assert (io.topic, io.replicas, io.task_duration) == (
        plain_io.topic,
        plain_io.replicas,
        plain_io.task_duration,
    )


def test_legacy_parser_and_odd_keys_are_reported_with_paths() -> None:
    doc = example_json("events")
    doc["spec"]["dataSchema"]["parser"] = {"type": "string", "parseSpec": {"format": "json"}}
    doc["spec"]["ioConfig"]["consumerProperties"] = {"security.protocol": "PLAINTEXT"}
    doc["spec"]["ioConfig"]["odd.key"] = 1
    spec = load_supervisor_spec(doc)
    assert spec.ignored_fields == ["spec.dataSchema.parser", 'spec.ioConfig["odd.key"]']
    assert spec.spec.io_config.consumer_properties == {"security.protocol": "PLAINTEXT"}


def test_flat_form_is_normalised_to_the_spec_form() -> None:
    wrapped = example_json("events")
    flat = {"type": "kafka", **wrapped["spec"]}
    assert load_supervisor_spec(flat) == load_supervisor_spec(wrapped)
    assert isinstance(load_supervisor_spec(flat).spec, KafkaSupervisorIngestionSpec)


def test_flat_form_errors_name_flat_paths() -> None:
    flat = {"type": "kafka", **example_json("events")["spec"]}
    flat["ioConfig"]["taskCount"] = 0
    assert load_errors(flat) == [("ioConfig.taskCount", "must be >= 1, got 0")]


def test_spec_wins_over_flat_copies_which_are_reported() -> None:
    doc = example_json("events")
    doc["dataSchema"] = {"dataSource": "other"}
    spec = load_supervisor_spec(doc)
    assert spec.datasource == "events"
    assert spec.ignored_fields == ["dataSchema"]


def test_json_text_and_bytes_are_accepted() -> None:
    text = (EXAMPLES_DIR / "events.json").read_text(encoding="utf-8")
    assert load_supervisor_spec(text) == load_supervisor_spec(text.encode()) == load_example("events")


# --------------------------------------------------------------------------- round trip


def _rich_spec() -> dict[str, Any]:
    doc = example_json("events")
    schema = doc["spec"]["dataSchema"]
    schema["timestampSpec"]["missingValue"] = "2020-01-01T00:00:00Z"
    schema["timestampSpec"]["format"] = "ISO"
    schema["dimensionsSpec"]["dimensions"].append({"name": "latency", "type": "double", "extra": 1})
    schema["dimensionsSpec"]["dimensionExclusions"] = ["debug"]
    schema["metricsSpec"][0]["expression"] = None
    schema["granularitySpec"]["segmentGranularity"] = {"type": "period", "period": "PT2H", "timeZone": "UTC"}
    schema["granularitySpec"]["queryGranularity"] = {"type": "duration", "duration": 900000}
    schema["transformSpec"] = {"filter": None}
    io = doc["spec"]["ioConfig"]
    io["lateMessageRejectionPeriod"] = "PT1H"
    io["earlyMessageRejectionPeriod"] = "PT0.5S"
    io["consumerProperties"] = {"bootstrap.servers": "k:9092", "fetch.min.bytes": 1, "x": True}
    doc["spec"]["tuningConfig"] = {
        "type": "kafka",
        "reportParseExceptions": True,
        "maxSavedParseExceptions": 5,
    }
    doc["context"] = {"a": [1, 2]}
    return doc


@pytest.mark.parametrize("name", ["wikipedia", "events"])
def test_examples_round_trip(name: str) -> None:
    spec = load_example(name)
    dumped = spec.to_druid_json()
    assert load_supervisor_spec(dumped) == spec
    assert load_supervisor_spec(json.dumps(dumped)) == spec
    assert dumped["spec"]["dataSchema"]["dataSource"] == name


def test_rich_spec_round_trips_with_camel_case_and_ignored_fields() -> None:
    spec = load_supervisor_spec(_rich_spec())
    dumped = spec.to_druid_json()
    again = load_supervisor_spec(json.loads(json.dumps(dumped)))
    assert again == spec
    assert again.ignored_fields == spec.ignored_fields
    assert dumped["spec"]["ioConfig"]["lateMessageRejectionPeriod"] == "PT1H"
    assert dumped["spec"]["ioConfig"]["earlyMessageRejectionPeriod"] == "PT0.5S"
    assert dumped["spec"]["dataSchema"]["timestampSpec"] == {
        "column": "ts",
        "format": "iso",
        "missingValue": "2020-01-01T00:00:00Z",
    }
    assert dumped["spec"]["dataSchema"]["granularitySpec"]["segmentGranularity"] == {
        "type": "period",
        "period": "PT2H",
    }
    assert dumped["spec"]["dataSchema"]["granularitySpec"]["queryGranularity"] == "FIFTEEN_MINUTE"
    assert dumped["spec"]["dataSchema"]["metricsSpec"][0] == {
        "type": "count",
        "name": "count",
        "expression": None,
    }
    assert "lateMessageRejectionStartDateTime" not in dumped["spec"]["ioConfig"]


def test_models_are_frozen_and_accept_snake_case_names() -> None:
    spec = load_example("events")
    with pytest.raises(ValidationError, match="frozen"):
        spec.spec.io_config.task_count = 5
    metric = MetricSpec.model_validate({"type": "longSum", "name": "n", "field_name": "v"})
    assert metric.field_name == "v"
    assert metric.model_dump(by_alias=True, mode="json") == {"type": "longSum", "name": "n", "fieldName": "v"}


def test_timestamp_format_is_normalised_to_lowercase() -> None:
    spec = load_supervisor_spec(_rich_spec())
    assert spec.spec.data_schema.timestamp_spec.format == "iso"
    assert spec.spec.data_schema.timestamp_spec.missing_value == utc(2020, 1, 1)


def test_report_parse_exceptions_means_no_parse_exceptions_allowed() -> None:
    tuning = load_supervisor_spec(_rich_spec()).spec.tuning_config
    assert tuning.report_parse_exceptions is True
    assert tuning.max_parse_exceptions == 0
    assert tuning.max_saved_parse_exceptions == 1


def test_tuning_defaults_and_null_max_parse_exceptions() -> None:
    doc = example_json("events")
    doc["spec"]["tuningConfig"] = {"type": "kafka", "maxParseExceptions": None}
    tuning = load_supervisor_spec(doc).spec.tuning_config
    assert tuning.max_parse_exceptions == UNLIMITED_PARSE_EXCEPTIONS == 2**31 - 1
    assert (tuning.max_rows_per_segment, tuning.max_rows_in_memory) == (5_000_000, 150_000)
    assert tuning.max_saved_parse_exceptions == 0
    assert tuning.log_parse_exceptions is False


def test_io_defaults() -> None:
    doc = {"type": "kafka", "spec": {"dataSchema": {"dataSource": "d"}, "ioConfig": {"topic": "t"}}}
    spec = load_supervisor_spec(doc)
    io = spec.spec.io_config
    assert (io.task_count, io.replicas) == (1, 1)
    assert (io.task_duration, io.period, io.start_delay) == (
        timedelta(hours=1),
        timedelta(seconds=30),
        timedelta(seconds=5),
    )
    assert io.completion_timeout == timedelta(minutes=30)
    assert io.late_message_rejection_period is None
    schema = spec.spec.data_schema
    assert (schema.timestamp_spec.column, schema.timestamp_spec.format) == ("timestamp", "auto")
    assert schema.granularity_spec.segment_granularity.name == "HOUR"
    assert schema.granularity_spec.query_granularity.name == "NONE"
    assert schema.granularity_spec.rollup is True
    assert isinstance(spec, SupervisorSpec)


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
        _patched(*IO, "inputFormat", value={"type": "csv"}),
        "spec.ioConfig.inputFormat.type",
        "'json'",
    ),
    ("granularitySpec-type", _patched(*GS, "type", value="arbitrary"), f"{P_GS}.type", "'uniform'"),
    (
        "unknown-aggregator",
        _patched(*METRICS, 1, "type", value="hyperUnique"),
        f"{P_DS}.metricsSpec[1].type",
        "unknown aggregator type 'hyperUnique'",
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
        ("spec.ioConfig.topic", "required field is missing"),
        ("spec.tuningConfig.maxRowsInMemory", "expected an integer, got string"),
    ]
    text = str(caught.value)
    assert text.startswith("3 problems in supervisor spec:")
    assert "  spec.ioConfig.topic: required field is missing" in text.splitlines()


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


# --------------------------------------------------------------------------- granularity


@pytest.mark.parametrize(
    ("spelling", "expected"),
    [
        ("none", Granularity("none")),
        ("All", Granularity("all")),
        ("second", Granularity("period", millis=1_000)),
        ("MINUTE", Granularity("period", millis=60_000)),
        ("five_minute", Granularity("period", millis=300_000)),
        ("TEN_MINUTE", Granularity("period", millis=600_000)),
        ("FIFTEEN_MINUTE", Granularity("period", millis=900_000)),
        ("THIRTY_MINUTE", Granularity("period", millis=1_800_000)),
        ("hour", Granularity("period", millis=3_600_000)),
        ("SIX_HOUR", Granularity("period", millis=21_600_000)),
        ("EIGHT_HOUR", Granularity("period", millis=28_800_000)),
        ("day", Granularity("period", days=1)),
        ("WEEK", Granularity("period", days=7)),
        ("month", Granularity("period", months=1)),
        ("QUARTER", Granularity("period", months=3)),
        ("year", Granularity("period", months=12)),
        ({"type": "period", "period": "PT15M"}, Granularity("period", millis=900_000)),
        ({"type": "period", "period": "P1W"}, Granularity("period", days=7)),
        ({"type": "period", "period": "P3M", "timeZone": "Etc/UTC"}, Granularity("period", months=3)),
        (
            {"type": "period", "period": "P1Y", "timeZone": "Z", "origin": "1970-01-01T00:00:00.000Z"},
            Granularity("period", months=12),
        ),
        ({"type": "period", "period": "PT1H30M"}, Granularity("period", millis=5_400_000)),
        ({"type": "duration", "duration": 7_200_000}, Granularity("period", millis=7_200_000)),
        ({"type": "none"}, Granularity("none")),
        ({"type": "all"}, Granularity("all")),
        ("PT2H", Granularity("period", millis=7_200_000)),
    ],
)
def test_granularity_spellings(spelling: object, expected: Granularity) -> None:
    assert Granularity.parse(spelling) == expected


@pytest.mark.parametrize(
    ("granularity", "name", "json_form"),
    [
        (Granularity("none"), "NONE", "NONE"),
        (Granularity("all"), "ALL", "ALL"),
        (Granularity("period", millis=3_600_000), "HOUR", "HOUR"),
        (Granularity("period", millis=900_000), "FIFTEEN_MINUTE", "FIFTEEN_MINUTE"),
        (Granularity("period", days=7), "WEEK", "WEEK"),
        (Granularity("period", months=3), "QUARTER", "QUARTER"),
        (Granularity("period", millis=7_200_000), "PT2H", {"type": "period", "period": "PT2H"}),
        (Granularity("period", days=2), "P2D", {"type": "period", "period": "P2D"}),
        (Granularity("period", months=24), "P2Y", {"type": "period", "period": "P2Y"}),
        (Granularity("period", millis=500), "PT0.5S", {"type": "period", "period": "PT0.5S"}),
    ],
)
def test_granularity_names_and_json(granularity: Granularity, name: str, json_form: object) -> None:
    assert granularity.name == name
    assert granularity.to_json() == json_form
    assert Granularity.parse(json_form) == granularity


def test_granularity_iso_period() -> None:
    assert Granularity.parse("FIFTEEN_MINUTE").iso_period == "PT15M"
    assert Granularity.parse("WEEK").iso_period == "P1W"
    assert Granularity.parse("YEAR").iso_period == "P1Y"
    assert Granularity.parse("NONE").iso_period == ""


@pytest.mark.parametrize(
    ("spelling", "path", "fragment"),
    [
        ("P1DT1H", "", "combined period"),
        ("P1M1D", "", "combined period"),
        ("PT0S", "", "must be positive"),
        ("-PT1H", "", "negative"),
        ("fortnight", "", "unknown granularity"),
        ({"type": "period", "period": "PT1H", "timeZone": "America/New_York"}, "timeZone", "only UTC"),
        ({"type": "period", "period": "PT1H", "origin": "1970-01-01T01:00:00Z"}, "origin", "epoch"),
        ({"type": "period", "period": "PT1H", "origin": "noon"}, "origin", "ISO-8601"),
        ({"type": "period"}, "period", "period string"),
        ({"type": "period", "period": "PT1H", "offset": 1}, "offset", "unexpected field"),
        ({"type": "duration", "duration": -5}, "duration", "must be > 0"),
        ({"type": "duration", "duration": "PT1H"}, "duration", "milliseconds"),
        ({"type": "arbitrary"}, "type", "unknown granularity type"),
        ({"period": "PT1H"}, "type", "needs a string 'type'"),
        (None, "", "got null"),
    ],
)
def test_bad_granularities(spelling: object, path: str, fragment: str) -> None:
    with pytest.raises(SpecError) as caught:
        Granularity.parse(spelling)
    assert len(caught.value.errors) == 1
    assert caught.value.errors[0][0] == path
    assert fragment in caught.value.errors[0][1]


def test_granularity_values_are_validated_on_construction() -> None:
    with pytest.raises(SpecError):
        Granularity("period", days=1, millis=1)
    with pytest.raises(SpecError):
        Granularity("period")
    with pytest.raises(SpecError):
        Granularity("none", days=1)


# Expected bucket bounds below were worked out by hand with a calendar.
# 2024-02-29 is a Thursday (leap day); 2023-12-31 a Sunday; 2021-01-03 a Sunday in ISO week
# 2020-W53 (which starts Monday 2020-12-28); 1969-12-31 a Wednesday.
A = utc(2024, 2, 29, 13, 47, 31, 123456)
B = utc(2023, 12, 31, 23, 59, 59, 999000)
C = utc(2021, 1, 3, 5, 0, 0)
D = utc(1969, 12, 31, 23, 30, 0)
E = utc(2024, 4, 1, 0, 0, 0)

BUCKETS: list[tuple[str, datetime, datetime, datetime]] = [
    ("NONE", A, utc(2024, 2, 29, 13, 47, 31, 123000), utc(2024, 2, 29, 13, 47, 31, 124000)),
    ("NONE", E, E, utc(2024, 4, 1, 0, 0, 0, 1000)),
    ("ALL", A, utc(1000, 1, 1), utc(3000, 1, 1)),
    ("ALL", D, utc(1000, 1, 1), utc(3000, 1, 1)),
    ("SECOND", A, utc(2024, 2, 29, 13, 47, 31), utc(2024, 2, 29, 13, 47, 32)),
    ("SECOND", B, utc(2023, 12, 31, 23, 59, 59), utc(2024, 1, 1)),
    ("MINUTE", A, utc(2024, 2, 29, 13, 47), utc(2024, 2, 29, 13, 48)),
    ("MINUTE", B, utc(2023, 12, 31, 23, 59), utc(2024, 1, 1)),
    ("FIVE_MINUTE", A, utc(2024, 2, 29, 13, 45), utc(2024, 2, 29, 13, 50)),
    ("TEN_MINUTE", A, utc(2024, 2, 29, 13, 40), utc(2024, 2, 29, 13, 50)),
    ("FIFTEEN_MINUTE", A, utc(2024, 2, 29, 13, 45), utc(2024, 2, 29, 14, 0)),
    ("FIFTEEN_MINUTE", B, utc(2023, 12, 31, 23, 45), utc(2024, 1, 1)),
    ("THIRTY_MINUTE", A, utc(2024, 2, 29, 13, 30), utc(2024, 2, 29, 14, 0)),
    ("THIRTY_MINUTE", D, utc(1969, 12, 31, 23, 30), utc(1970, 1, 1)),
    ("HOUR", A, utc(2024, 2, 29, 13), utc(2024, 2, 29, 14)),
    ("HOUR", D, utc(1969, 12, 31, 23), utc(1970, 1, 1)),
    ("HOUR", E, E, utc(2024, 4, 1, 1)),
    ("SIX_HOUR", A, utc(2024, 2, 29, 12), utc(2024, 2, 29, 18)),
    ("SIX_HOUR", B, utc(2023, 12, 31, 18), utc(2024, 1, 1)),
    ("SIX_HOUR", D, utc(1969, 12, 31, 18), utc(1970, 1, 1)),
    ("EIGHT_HOUR", A, utc(2024, 2, 29, 8), utc(2024, 2, 29, 16)),
    ("EIGHT_HOUR", B, utc(2023, 12, 31, 16), utc(2024, 1, 1)),
    ("DAY", A, utc(2024, 2, 29), utc(2024, 3, 1)),
    ("DAY", B, utc(2023, 12, 31), utc(2024, 1, 1)),
    ("DAY", D, utc(1969, 12, 31), utc(1970, 1, 1)),
    ("WEEK", A, utc(2024, 2, 26), utc(2024, 3, 4)),
    ("WEEK", B, utc(2023, 12, 25), utc(2024, 1, 1)),
    ("WEEK", C, utc(2020, 12, 28), utc(2021, 1, 4)),
    ("WEEK", D, utc(1969, 12, 29), utc(1970, 1, 5)),
    ("WEEK", utc(2024, 1, 1), utc(2024, 1, 1), utc(2024, 1, 8)),
    ("MONTH", A, utc(2024, 2, 1), utc(2024, 3, 1)),
    ("MONTH", B, utc(2023, 12, 1), utc(2024, 1, 1)),
    ("MONTH", D, utc(1969, 12, 1), utc(1970, 1, 1)),
    ("QUARTER", A, utc(2024, 1, 1), utc(2024, 4, 1)),
    ("QUARTER", B, utc(2023, 10, 1), utc(2024, 1, 1)),
    ("QUARTER", E, utc(2024, 4, 1), utc(2024, 7, 1)),
    ("QUARTER", utc(2024, 8, 15), utc(2024, 7, 1), utc(2024, 10, 1)),
    ("QUARTER", D, utc(1969, 10, 1), utc(1970, 1, 1)),
    ("YEAR", A, utc(2024, 1, 1), utc(2025, 1, 1)),
    ("YEAR", B, utc(2023, 1, 1), utc(2024, 1, 1)),
    ("YEAR", D, utc(1969, 1, 1), utc(1970, 1, 1)),
]


@pytest.mark.parametrize(
    ("name", "moment", "start", "end"),
    [pytest.param(*row, id=f"{row[0]}-{row[1].isoformat()}") for row in BUCKETS],
)
def test_truncate_and_bucket_end(name: str, moment: datetime, start: datetime, end: datetime) -> None:
    granularity = Granularity.parse(name)
    assert granularity.truncate(moment) == start
    assert granularity.truncate(moment).tzinfo == UTC
    assert granularity.bucket_end(start) == end
    assert granularity.bucket_end(moment) == end
    assert granularity.truncate(start) == start


@pytest.mark.parametrize(
    ("spelling", "moment", "start", "end"),
    [
        ({"type": "period", "period": "PT2H"}, A, utc(2024, 2, 29, 12), utc(2024, 2, 29, 14)),
        (
            {"type": "duration", "duration": 90_000},
            utc(1970, 1, 1, 0, 4),
            utc(1970, 1, 1, 0, 3),
            utc(1970, 1, 1, 0, 4, 30),
        ),
        # 2024-02-26 is 19775 days (1412 fortnights + 7 days) after Monday 1970-01-05,
        # so the P2W bucket holding 2024-02-29 starts 2024-02-19.
        ({"type": "period", "period": "P2W"}, utc(2024, 2, 29), utc(2024, 2, 19), utc(2024, 3, 4)),
        ({"type": "period", "period": "P2D"}, utc(1970, 1, 4, 12), utc(1970, 1, 3), utc(1970, 1, 5)),
        ({"type": "period", "period": "P6M"}, utc(2024, 8, 15), utc(2024, 7, 1), utc(2025, 1, 1)),
        ({"type": "period", "period": "P1M"}, utc(2024, 12, 31, 23), utc(2024, 12, 1), utc(2025, 1, 1)),
    ],
)
def test_period_buckets(spelling: object, moment: datetime, start: datetime, end: datetime) -> None:
    granularity = Granularity.parse(spelling)
    assert granularity.truncate(moment) == start
    assert granularity.bucket_end(start) == end


def test_truncate_converts_other_zones_and_rejects_naive() -> None:
    plus_two = timezone(timedelta(hours=2))
    assert Granularity.parse("DAY").truncate(datetime(2024, 1, 1, 1, 30, tzinfo=plus_two)) == utc(
        2023, 12, 31
    )
    with pytest.raises(ValueError):
        Granularity.parse("DAY").truncate(datetime(2024, 1, 1))  # noqa: DTZ001


# --------------------------------------------------------------------------- durations


@pytest.mark.parametrize(
    ("text", "expected", "written"),
    [
        ("PT1H", timedelta(hours=1), "PT1H"),
        ("PT30S", timedelta(seconds=30), "PT30S"),
        ("PT5S", timedelta(seconds=5), "PT5S"),
        ("PT30M", timedelta(minutes=30), "PT30M"),
        ("pt10m", timedelta(minutes=10), "PT10M"),
        ("PT0.5S", timedelta(milliseconds=500), "PT0.5S"),
        ("PT90M", timedelta(minutes=90), "PT1H30M"),
        ("P1D", timedelta(days=1), "P1D"),
        ("P1W", timedelta(days=7), "P7D"),
        ("P1DT2H3M4.25S", timedelta(days=1, hours=2, minutes=3, seconds=4.25), "P1DT2H3M4.25S"),
        ("PT0S", timedelta(0), "PT0S"),
    ],
)
def test_durations_parse_and_format(text: str, expected: timedelta, written: str) -> None:
    assert parse_iso_duration(text) == expected
    assert format_iso_duration(expected) == written
    assert parse_iso_duration(written) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("P1M", "months and years"),
        ("P1Y", "months and years"),
        ("PT", "not an ISO-8601 period"),
        ("P", "not an ISO-8601 period"),
        ("1H", "not an ISO-8601 period"),
        ("PT1H2", "not an ISO-8601 period"),
        ("-PT1S", "negative"),
        ("PT1.0000001S", "microsecond"),
    ],
)
def test_bad_durations(text: str, fragment: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_iso_duration(text)
    assert fragment in str(caught.value)
