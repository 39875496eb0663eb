"""Spec loading: Druid's examples, ignored fields, the flat form, round trips and defaults.

Needs no infrastructure and no fixtures.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
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
    load_example,
    load_supervisor_spec,
)
from tests.helpers import example_json


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
    metrics = [(m.type, m.name, m.field_name, m.kind) for m in schema.metrics_spec]
    assert metrics == [
        ("count", "count", None, "count"),
        ("longSum", "value_sum", "value", "sum"),
        ("longMin", "value_min", "value", "min"),
        ("longMax", "value_max", "value", "max"),
        ("doubleSum", "price_sum", "price", "sum"),
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


def test_legacy_parser_and_odd_keys_are_refused_together_with_paths() -> None:
    doc = example_json("events")
    doc["spec"]["dataSchema"]["parser"] = {"type": "string", "parseSpec": {"format": "json"}}
    doc["spec"]["ioConfig"]["odd.key"] = 1
    with pytest.raises(SpecError) as refused:
        load_supervisor_spec(doc)
    assert [path for path, _ in refused.value.errors] == ["spec.dataSchema.parser", 'spec.ioConfig["odd.key"]']


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
    schema["dimensionsSpec"]["dimensions"].append({"name": "latency", "type": "double", "createBitmapIndex": True})
    schema["dimensionsSpec"]["dimensionExclusions"] = ["debug"]
    schema["metricsSpec"][0]["expression"] = None
    schema["granularitySpec"]["segmentGranularity"] = {"type": "period", "period": "PT2H", "timeZone": "UTC"}
    schema["granularitySpec"]["queryGranularity"] = {"type": "duration", "duration": 900000}
    schema["transformSpec"] = {"filter": None}
    io = doc["spec"]["ioConfig"]
    io["consumerProperties"] = {"bootstrap.servers": "k:9092", "fetch.min.bytes": 1, "check.crcs": True}
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
    doc = {"type": "kafka", "spec": {"dataSchema": {"dataSource": "d", "dimensionsSpec": {"dimensions": ["a"]}},
                                     "ioConfig": {"topic": "t"}}}
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
