"""Druid fields that change what is ingested and are not implemented yet are refused, naming their
path: accepting and ignoring them would ingest other data than Druid does, without a word.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from specs import SpecError, load_supervisor_spec
from tests.helpers import spec_json


def _data_schema(change: Callable[[dict[str, Any]], object]) -> Callable[[dict[str, Any]], object]:
    return lambda raw: change(raw["spec"]["dataSchema"])


def _io(change: Callable[[dict[str, Any]], object]) -> Callable[[dict[str, Any]], object]:
    return lambda raw: change(raw["spec"]["ioConfig"])


@pytest.mark.parametrize(("change", "path"), [
    (_data_schema(lambda s: s.update(transformSpec={"transforms": [{"type": "expression", "name": "x",
                                                                    "expression": "array_length(a)"}]})),
     "spec.dataSchema.transformSpec.transforms[0].expression"),
    (lambda raw: (raw["spec"]["dataSchema"]["dimensionsSpec"].update(useSchemaDiscovery=True),
                  raw["spec"]["ioConfig"].update(inputFormat={"type": "json", "flattenSpec": {"fields": [
                      {"type": "path", "name": "a", "expr": "$.a.b"}]}})),
     "spec.ioConfig.inputFormat.flattenSpec.fields"),
    (_data_schema(lambda s: s["dimensionsSpec"].update(spatialDimensions=[{"dimName": "c", "dims": ["x", "y"]}])),
     "spec.dataSchema.dimensionsSpec.spatialDimensions"),
    (_io(lambda io: io.update(inputFormat={"type": "json", "flattenSpec": {"fields": [
        {"type": "path", "name": "a", "expr": "$..a"}]}})), "spec.ioConfig.inputFormat.flattenSpec.fields[0].expr"),
], ids=["transform-function", "useSchemaDiscovery-with-flattened-fields", "spatialDimensions",
        "flattenSpec-deep-scan"])
def test_a_field_that_would_change_the_data_is_refused_naming_it(change: Any, path: str) -> None:
    raw = spec_json("ds", "topic")
    change(raw)
    with pytest.raises(SpecError) as refused:
        load_supervisor_spec(raw)
    [(found, message)] = refused.value.errors
    assert found == path and "not supported" in message, refused.value.errors


def test_empty_or_default_forms_of_those_fields_are_accepted() -> None:
    raw = spec_json("ds", "topic")
    raw["spec"]["dataSchema"]["transformSpec"] = {"transforms": [], "filter": None}
    raw["spec"]["ioConfig"]["inputFormat"] = {"type": "json", "flattenSpec": {"useFieldDiscovery": True, "fields": []}}
    raw["spec"]["dataSchema"]["dimensionsSpec"]["useSchemaDiscovery"] = False
    load_supervisor_spec(raw)  # no error


@pytest.mark.parametrize(("change", "path"), [
    (_data_schema(lambda s: s.update(parser={"type": "string", "parseSpec": {"format": "json"}})),
     "spec.dataSchema.parser"),
    (_data_schema(lambda s: s.update(granularitySpecs={"segmentGranularity": "DAY"})),
     "spec.dataSchema.granularitySpecs"),
    (_data_schema(lambda s: s["metricsSpec"][1].update(expression="value * 2")),
     "spec.dataSchema.metricsSpec[1].expression"),
    (_io(lambda io: io.update(inputFormat={"type": "json", "assumeNewlineDelimited": True})),
     "spec.ioConfig.inputFormat.assumeNewlineDelimited"),
    (_io(lambda io: io.update(inputFormat={"type": "json", "featureSpec": {"ALLOW_COMMENTS": True}})),
     "spec.ioConfig.inputFormat.featureSpec"),
    (_io(lambda io: io.update({"odd.key": 1})), 'spec.ioConfig["odd.key"]'),
], ids=["legacy-parser", "misspelt-section", "metric-expression", "newline-delimited", "featureSpec", "unknown-key"])
def test_a_field_not_known_to_be_harmless_is_refused_naming_it(change: Any, path: str) -> None:
    """A field is ignored only when it is known not to change the data; a typo is refused, not ignored."""
    raw = spec_json("ds", "topic")
    change(raw)
    with pytest.raises(SpecError) as refused:
        load_supervisor_spec(raw)
    assert [found for found, _ in refused.value.errors] == [path], refused.value.errors


def test_druid_tuning_and_scheduling_hints_are_accepted_and_listed_as_ignored() -> None:
    raw = spec_json("ds", "topic")
    raw["spec"]["tuningConfig"] = {"type": "kafka", "maxBytesInMemory": 0, "indexSpec": {"bitmap": {"type": "roaring"}},
                                   "partitionsSpec": {"type": "dynamic"}, "handoffConditionTimeout": 0}
    raw["spec"]["ioConfig"]["autoScalerConfig"] = {"enableTaskAutoScaler": True}
    raw["spec"]["ioConfig"]["pollTimeout"] = 100
    raw["spec"]["dataSchema"]["dimensionsSpec"]["dimensions"][0] = {"name": "country", "createBitmapIndex": False}
    assert load_supervisor_spec(raw).ignored_fields == [
        "spec.dataSchema.dimensionsSpec.dimensions[0].createBitmapIndex",
        "spec.ioConfig.autoScalerConfig", "spec.ioConfig.pollTimeout",
        "spec.tuningConfig.maxBytesInMemory", "spec.tuningConfig.indexSpec", "spec.tuningConfig.partitionsSpec",
        "spec.tuningConfig.handoffConditionTimeout"]


def test_a_spec_as_druid_returns_it_with_every_default_written_out_is_accepted() -> None:
    """Druid's GET /supervisor/{id} writes out defaults (nulls, falses, Druid's alias names); all are harmless."""
    raw = spec_json("ds", "topic")
    schema, io = raw["spec"]["dataSchema"], raw["spec"]["ioConfig"]
    schema["timestampSpec"]["missingValue"] = None
    schema["dimensionsSpec"].update(
        dimensions=[{"type": "string", "name": d, "multiValueHandling": "SORTED_ARRAY", "createBitmapIndex": True}
                    for d in ("country", "device")],
        dimensionExclusions=["ts"], includeAllDimensions=False, useSchemaDiscovery=False)
    for metric in schema["metricsSpec"]:
        metric["expression"] = None
    schema["granularitySpec"]["intervals"] = []
    schema["transformSpec"] = {"filter": None, "transforms": []}
    io.update(stream="topic", useEarliestSequenceNumber=True, autoScalerConfig=None, topicPattern=None,
              lateMessageRejectionPeriod=None, idleConfig=None, inputFormat={
                  "type": "json", "keepNullColumns": False, "assumeNewlineDelimited": False,
                  "useJsonNodeReader": False})
    raw["spec"]["tuningConfig"].update(maxBytesInMemory=0, skipSequenceNumberAvailabilityCheck=False,
                                       indexSpec={"bitmap": {"type": "roaring"}}, partitionsSpec=None)
    spec = load_supervisor_spec(raw)
    assert spec.spec.data_schema.dimensions_spec.names == ["country", "device"]
    assert "spec.tuningConfig.indexSpec" in spec.ignored_fields


def test_message_rejection_windows_bound_the_event_times_a_task_keeps() -> None:
    """Druid's windows, fixed when a task is planned: late is before planning, early after its duration."""
    created = datetime(2026, 11, 23, 12, tzinfo=UTC)
    raw = spec_json("ds", "topic", lateMessageRejectionPeriod="PT2H", earlyMessageRejectionPeriod="PT30M",
                    taskDuration="PT1H")
    io = load_supervisor_spec(raw).spec.io_config
    assert io.message_time_bounds(created) == (datetime(2026, 11, 23, 10, tzinfo=UTC),
                                               datetime(2026, 11, 23, 13, 30, tzinfo=UTC))
    raw = spec_json("ds", "topic", lateMessageRejectionStartDateTime="2026-01-01T00:00:00Z")
    assert load_supervisor_spec(raw).spec.io_config.message_time_bounds(created) == (
        datetime(2026, 1, 1, tzinfo=UTC), None)
    assert load_supervisor_spec(spec_json("ds", "topic")).spec.io_config.message_time_bounds(created) == (None, None)


@pytest.mark.parametrize(("filter_", "path", "fragment"), [
    ({"type": "columnComparison", "dimensions": ["country", "device"]}, "filter.type",
     "'columnComparison' is not supported"),
    ({"type": "search", "dimension": "country", "query": {"type": "regex", "pattern": "D"}}, "filter.query.type",
     "'regex' is not supported"),
    ({"type": "and", "fields": [{"type": "selector", "dimension": "country", "value": "DE",
                                 "extractionFn": {"type": "upper"}}]}, "filter.fields[0].extractionFn",
     "extraction functions"),
    ({"type": "bound", "dimension": "value", "ordering": "numeric"}, "filter", "needs a lower or an upper bound"),
    ({"type": "bound", "dimension": "value", "lower": "1", "ordering": "strlen"}, "filter.ordering", "strlen"),
    ({"type": "not", "field": {"type": "in", "dimension": "country", "value": "DE"}}, "filter.field.value",
     "does not take 'value'"),
    ({"type": "interval", "dimension": "__time", "intervals": ["2026-11-01/yesterday"]}, "filter.intervals", ""),
], ids=["unsupported-type", "unsupported-search-query", "extractionFn", "bound-without-bounds", "ordering",
        "misspelt-key", "bad-interval"])
def test_a_transform_filter_we_cannot_apply_exactly_is_refused_naming_its_path(filter_: Any, path: str,
                                                                               fragment: str) -> None:
    raw = spec_json("ds", "topic")
    raw["spec"]["dataSchema"]["transformSpec"] = {"filter": filter_}
    with pytest.raises(SpecError) as refused:
        load_supervisor_spec(raw)
    [(found, message)] = refused.value.errors
    assert found == f"spec.dataSchema.transformSpec.{path}" and fragment in message, refused.value.errors


@pytest.mark.parametrize(("query", "segment"), [("DAY", "HOUR"), ("WEEK", "MONTH"), ("ALL", "DAY"),
                                                ({"type": "period", "period": "P3D"}, "WEEK")])
def test_a_query_granularity_that_does_not_fit_in_the_segments_is_refused(query: Any, segment: str) -> None:
    """A row's truncated __time must lie in its segment's interval: pruning and compaction go by intervals."""
    raw = spec_json("ds", "topic")
    raw["spec"]["dataSchema"]["granularitySpec"].update(queryGranularity=query, segmentGranularity=segment)
    with pytest.raises(SpecError) as refused:
        load_supervisor_spec(raw)
    [(found, message)] = refused.value.errors
    assert found == "spec.dataSchema.granularitySpec.queryGranularity" and "do not fit" in message


def test_an_empty_dimension_list_or_include_all_dimensions_discovers_string_dimensions() -> None:
    raw = spec_json("ds", "topic")
    raw["spec"]["dataSchema"]["dimensionsSpec"] = {"dimensions": [], "dimensionExclusions": ["debug"]}
    assert load_supervisor_spec(raw).spec.data_schema.dimensions_spec.discovers
    raw["spec"]["dataSchema"]["dimensionsSpec"] = {"dimensions": [{"name": "n", "type": "long"}],
                                                   "includeAllDimensions": True}
    assert load_supervisor_spec(raw).spec.data_schema.dimensions_spec.discovers
    assert not load_supervisor_spec(spec_json("ds", "topic")).spec.data_schema.dimensions_spec.discovers


@pytest.mark.parametrize(("transforms", "path"), [
    ([{"type": "expression", "name": "__time", "expression": "timestamp_floor(__time, 'PT1H')"}],
     "transforms[0].name"),
    ([{"type": "expression", "name": "x", "expression": "1"}, {"type": "expression", "name": "x",
                                                              "expression": "2"}], "transforms[1].name"),
    ([{"type": "javascript", "name": "x", "function": "function(r) { return 1; }"}], "transforms[0].type"),
    ([{"type": "expression", "name": "x", "expression": "a ||"}], "transforms[0].expression"),
], ids=["__time", "duplicate", "javascript", "syntax"])
def test_a_transform_we_cannot_compute_exactly_is_refused_naming_its_path(transforms: Any, path: str) -> None:
    raw = spec_json("ds", "topic")
    raw["spec"]["dataSchema"]["transformSpec"] = {"transforms": transforms}
    with pytest.raises(SpecError) as refused:
        load_supervisor_spec(raw)
    assert f"spec.dataSchema.transformSpec.{path}" == refused.value.errors[0][0], refused.value.errors


@pytest.mark.parametrize(("metric", "path"), [
    ({"type": "filtered", "aggregator": {"type": "count", "name": "n"}}, "filter"),
    ({"type": "filtered", "filter": {"type": "true"}, "name": "n"}, "aggregator"),
    ({"type": "filtered", "filter": {"type": "spatial", "dimension": "d"},
      "aggregator": {"type": "count", "name": "n"}}, "filter.type"),
    ({"type": "filtered", "filter": {"type": "true"}, "aggregator": {"type": "filtered", "name": "n", "filter": {
        "type": "true"}, "aggregator": {"type": "count", "name": "n"}}}, "aggregator.type"),
    ({"type": "longSum", "name": "n", "fieldName": "v", "filter": {"type": "true"}}, "filter"),
], ids=["no-filter", "no-aggregator", "unsupported-filter", "nested", "filter-on-plain"])
def test_a_filtered_aggregator_we_cannot_compute_is_refused_naming_its_path(metric: Any, path: str) -> None:
    raw = spec_json("ds", "topic")
    raw["spec"]["dataSchema"]["metricsSpec"].append(metric)
    with pytest.raises(SpecError) as refused:
        load_supervisor_spec(raw)
    assert refused.value.errors[0][0] == f"spec.dataSchema.metricsSpec[5].{path}", refused.value.errors


def _kafka_format(**fields: Any) -> dict[str, Any]:
    return {"type": "kafka", "valueFormat": {"type": "json"}, **fields}


def test_the_kafka_input_format_names_the_record_metadata_columns() -> None:
    raw = spec_json("ds", "topic", inputFormat=_kafka_format(
        keyFormat={"type": "tsv", "columns": ["k"]}, headerFormat={"type": "string"},
        timestampColumnName="kts"))
    kafka = load_supervisor_spec(raw).spec.io_config.input_format
    assert kafka.metadata_source("kafka.key") == "key:tsv"
    assert kafka.metadata_source("kts") == "timestamp" and kafka.metadata_source("kafka.timestamp") is None
    assert kafka.metadata_source("kafka.topic") == "topic"
    assert kafka.metadata_source("kafka.header.trace") == "header:trace"
    assert kafka.value_spec.flatten_spec.use_field_discovery


@pytest.mark.parametrize(("fields", "path"), [
    ({"valueFormat": {"type": "kafka", "valueFormat": {"type": "json"}}}, "valueFormat.type"),
    ({"valueFormat": {"type": "csv", "columns": ["a"], "findColumnsFromHeader": True}},
     "valueFormat.findColumnsFromHeader"),
    ({"keyFormat": {"type": "json"}}, "keyFormat.type"),
    ({"headerFormat": {"type": "string", "encoding": "ISO-8859-1"}}, "headerFormat.encoding"),
    ({"keyColumnName": "kafka.topic"}, "topicColumnName"),
], ids=["kafka-value", "csv-value-header", "json-key", "latin1-headers", "same-names"])
def test_a_kafka_input_format_we_cannot_read_exactly_is_refused_naming_its_path(fields: Any, path: str) -> None:
    raw = spec_json("ds", "topic", inputFormat=_kafka_format(**fields))
    with pytest.raises(SpecError) as refused:
        load_supervisor_spec(raw)
    assert refused.value.errors[0][0] == f"spec.ioConfig.inputFormat.{path}", refused.value.errors


@pytest.mark.parametrize(("input_format", "path", "fragment"), [
    ({"type": "csv"}, "columns", "needs the names of its columns"),
    ({"type": "csv", "columns": ["t", "a"], "findColumnsFromHeader": True}, "findColumnsFromHeader", "header row"),
    ({"type": "tsv", "columns": ["t", "a"], "skipHeaderRows": 1}, "skipHeaderRows", "skipping header rows"),
    ({"type": "csv", "columns": ["t", "a"], "delimiter": ";"}, "delimiter", "a csv input format does not take it"),
    ({"type": "tsv", "columns": ["t", "a"], "delimiter": "\n"}, "delimiter", "other than a line break"),
    ({"type": "csv", "columns": ["t", "a", "A"]}, "columns[2]", "duplicate column name 'a'"),
    ({"type": "csv", "columns": ["t"], "flattenSpec": {"useFieldDiscovery": False}}, "flattenSpec", "does not take it"),
    ({"type": "csv", "columns": ["t"], "tryParseNumbers": True}, "tryParseNumbers", "numbers as numbers"),
    ({"type": "json", "columns": ["t"]}, "columns", "a json input format does not take it"),
    ({"type": "avro_stream"}, "avroBytesDecoder", "required for avro_stream"),
    ({"type": "avro_stream", "avroBytesDecoder": {"type": "schema_registry", "url": "http://r"}},
     "avroBytesDecoder.url", "not an allowed schema registry"),
    ({"type": "avro_stream", "avroBytesDecoder": {"type": "multiple_schemas_inline", "schemas": {}}},
     "avroBytesDecoder.type", "schema_inline or schema_registry"),
    ({"type": "protobuf"}, "protoBytesDecoder", "required for protobuf"),
    ({"type": "avro_stream", "avroBytesDecoder": {"type": "schema_inline", "schema": {"type": "record"}}},
     "avroBytesDecoder.schema", "not a valid Avro schema"),
    ({"type": "avro_stream", "avroBytesDecoder": {"type": "schema_inline", "schema": {"type": "string"}},
      "extractUnionsByType": True}, "extractUnionsByType", "union members"),
])
def test_a_csv_tsv_or_avro_format_we_cannot_read_as_druid_does_is_refused_naming_its_path(
        input_format: Any, path: str, fragment: str) -> None:
    with pytest.raises(SpecError) as refused:
        load_supervisor_spec(spec_json("ds", "topic", inputFormat=input_format))
    found, message = refused.value.errors[0]
    assert found == f"spec.ioConfig.inputFormat.{path}" and fragment in message, refused.value.errors


def test_csv_and_tsv_formats_as_druid_writes_them_are_accepted() -> None:
    for input_format in ({"type": "csv", "columns": ["t", "a"], "findColumnsFromHeader": False, "skipHeaderRows": 0,
                          "listDelimiter": "|"},
                         {"type": "tsv", "columns": ["t", "a"], "delimiter": ";"},
                         _kafka_format(valueFormat={"type": "tsv", "columns": ["t", "a"]})):
        spec = load_supervisor_spec(spec_json("ds", "topic", inputFormat=input_format))
        assert spec.spec.io_config.input_format.value_spec.columns == ("t", "a")


@pytest.mark.parametrize(("change", "path"), [
    (lambda s: s["dimensionsSpec"].update(dimensions=["country", "Country"]),
     "spec.dataSchema.dimensionsSpec.dimensions[1].name"),
    (lambda s: s["dimensionsSpec"].update(dimensions=["COUNT"]), "spec.dataSchema.metricsSpec[0].name"),
    (lambda s: s.update(transformSpec={"filter": {"type": "selector", "dimension": "__time", "value": "0"}}),
     "spec.dataSchema.transformSpec.filter"),
    (lambda s: s.update(transformSpec={"filter": {"type": "regex", "dimension": "country", "pattern": "(?<=x)y"}}),
     "spec.dataSchema.transformSpec.filter.pattern"),
    (lambda s: s.update(transformSpec={"filter": {"type": "like", "dimension": "country", "pattern": "a",
                                                  "escape": "ab"}}), "spec.dataSchema.transformSpec.filter.escape"),
], ids=["case-dimensions", "case-metric", "time-selector", "java-only-regex", "long-escape"])
def test_what_would_be_read_differently_or_crash_a_task_is_refused_at_submission(change: Any, path: str) -> None:
    raw = spec_json("ds", "topic")
    change(raw["spec"]["dataSchema"])
    with pytest.raises(SpecError) as refused:
        load_supervisor_spec(raw)
    assert refused.value.errors[0][0] == path, refused.value.errors
