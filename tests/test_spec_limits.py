"""Every spec field has a bound (:mod:`specs.limits`): accepted at the limit, refused one past it
naming its JSON path; and one busy supervisor does not hold up another's loop.

All but the last test need no infrastructure.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from overlord.dev.sample_data import make_sample_events, produce
from specs import SpecError, limits, load_supervisor_spec
from tests.helpers import committed_total, example_json, spec_json, wait_until

Doc = dict[str, Any]


def errors_of(doc: Doc) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as caught:
        load_supervisor_spec(doc)
    return caught.value.errors


def test_a_spec_of_100000_tasks_by_100000_replicas_is_refused_naming_both_paths() -> None:
    doc = example_json("events")
    doc["spec"]["ioConfig"].update(taskCount=100_000, replicas=100_000)
    errors = errors_of(doc)
    assert [path for path, _ in errors] == ["spec.ioConfig.taskCount", "spec.ioConfig.replicas"], errors
    assert all("got 100000" in message for _, message in errors), errors


def test_a_period_of_a_millisecond_is_refused_as_a_busy_loop() -> None:
    doc = example_json("events")
    doc["spec"]["ioConfig"]["period"] = "PT0.001S"
    assert errors_of(doc) == [("spec.ioConfig.period", "must be a positive duration of at least PT1S (a limit of "
                                                       "this service), got PT0.001S")]


def test_the_product_of_task_count_and_replicas_is_bounded_naming_both() -> None:
    doc = example_json("events")
    doc["spec"]["ioConfig"].update(taskCount=limits.MAX_TASKS // limits.MAX_REPLICAS, replicas=limits.MAX_REPLICAS)
    load_supervisor_spec(doc)
    doc["spec"]["ioConfig"]["taskCount"] += 1
    errors = errors_of(doc)
    assert [path for path, _ in errors] == ["spec.ioConfig.taskCount", "spec.ioConfig.replicas"], errors
    assert "taskCount * replicas must be <= 1000" in errors[0][1]


# --------------------------------------------------------------------------- one bound each

def _set(*steps: str, example: str = "events", **extra: Any) -> Callable[[Any], Doc]:
    """A spec of ``example`` whose field at ``steps`` is the value (``extra``: other ioConfig fields)."""
    def make(value: Any) -> Doc:
        doc = example_json(example)
        doc["spec"]["ioConfig"].update(extra)
        target = doc["spec"]
        for step in steps[:-1]:
            target = target.setdefault(step, {})
        target[steps[-1]] = value
        return doc
    return make


def _names(prefix: str, count: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(count)]


def _not(depth: int) -> Doc:
    """A filter ``depth`` levels deep: nots around a selector."""
    spec: Doc = {"type": "selector", "dimension": "country", "value": "x"}
    for _ in range(depth - 1):
        spec = {"type": "not", "field": spec}
    return spec


def _segment_at(granularity: Any) -> Doc:
    doc = example_json("events")
    doc["spec"]["dataSchema"]["granularitySpec"].update(segmentGranularity=granularity, queryGranularity="NONE")
    return doc


IO = ("ioConfig",)
TU = ("tuningConfig",)
DS = ("dataSchema",)
TRANSFORM = (*DS, "transformSpec")

# (name, spec of a value, value at the limit, value past it, path of the error)
BOUNDS: list[tuple[str, Callable[[Any], Doc], Any, Any, str]] = [
    ("taskCount", _set(*IO, "taskCount"), limits.MAX_TASK_COUNT, limits.MAX_TASK_COUNT + 1, "spec.ioConfig.taskCount"),
    ("replicas", _set(*IO, "replicas"), limits.MAX_REPLICAS, limits.MAX_REPLICAS + 1, "spec.ioConfig.replicas"),
    ("period-min", _set(*IO, "period"), "PT1S", "PT0.999999S", "spec.ioConfig.period"),
    ("period-max", _set(*IO, "period"), "P1D", "P1DT0.000001S", "spec.ioConfig.period"),
    ("taskDuration-min", _set(*IO, "taskDuration"), "PT1S", "PT0.5S", "spec.ioConfig.taskDuration"),
    ("taskDuration-max", _set(*IO, "taskDuration"), "P30D", "P30DT1S", "spec.ioConfig.taskDuration"),
    ("startDelay-max", _set(*IO, "startDelay"), "P1D", "P1DT1S", "spec.ioConfig.startDelay"),
    ("completionTimeout-min", _set(*IO, "completionTimeout"), "PT10S", "PT9.9S", "spec.ioConfig.completionTimeout"),
    ("completionTimeout-max", _set(*IO, "completionTimeout"), "P7D", "P7DT1S", "spec.ioConfig.completionTimeout"),
    ("lateMessageRejectionPeriod", _set(*IO, "lateMessageRejectionPeriod"), "P3650D", "P3651D",
     "spec.ioConfig.lateMessageRejectionPeriod"),
    ("earlyMessageRejectionPeriod", _set(*IO, "earlyMessageRejectionPeriod"), "P3650D", "P3651D",
     "spec.ioConfig.earlyMessageRejectionPeriod"),
    ("topic", _set(*IO, "topic"), "t" * limits.MAX_TOPIC_LENGTH, "t" * (limits.MAX_TOPIC_LENGTH + 1),
     "spec.ioConfig.topic"),
    ("topicPattern", _set(*IO, "topicPattern", topic=None), "t" * limits.MAX_PATTERN_LENGTH,
     "t" * (limits.MAX_PATTERN_LENGTH + 1), "spec.ioConfig.topicPattern"),
    ("dataSource", _set(*DS, "dataSource"), "d" * limits.MAX_DATASOURCE_BYTES, "d" * (limits.MAX_DATASOURCE_BYTES + 1),
     "spec.dataSchema.dataSource"),
    ("timestamp-column", _set(*DS, "timestampSpec", "column"), "c" * limits.MAX_NAME_LENGTH,
     "c" * (limits.MAX_NAME_LENGTH + 1), "spec.dataSchema.timestampSpec.column"),
    ("dimension-name", _set(*DS, "dimensionsSpec", "dimensions"), ["d" * limits.MAX_NAME_LENGTH],
     ["d" * (limits.MAX_NAME_LENGTH + 1)], "spec.dataSchema.dimensionsSpec.dimensions[0].name"),
    ("dimensions", _set(*DS, "dimensionsSpec", "dimensions"), _names("d", limits.MAX_DIMENSIONS),
     _names("d", limits.MAX_DIMENSIONS + 1), "spec.dataSchema.dimensionsSpec.dimensions"),
    ("dimensionExclusions", _set(*DS, "dimensionsSpec", "dimensionExclusions"),
     _names("x", limits.MAX_DIMENSION_EXCLUSIONS), _names("x", limits.MAX_DIMENSION_EXCLUSIONS + 1),
     "spec.dataSchema.dimensionsSpec.dimensionExclusions"),
    ("metrics", _set(*DS, "metricsSpec"),
     [{"type": "longSum", "name": n, "fieldName": "value"} for n in _names("m", limits.MAX_METRICS)],
     [{"type": "longSum", "name": n, "fieldName": "value"} for n in _names("m", limits.MAX_METRICS + 1)],
     "spec.dataSchema.metricsSpec"),
    ("metric-fieldName", _set(*DS, "metricsSpec"), [{"type": "longSum", "name": "s", "fieldName": "f" * 1024}],
     [{"type": "longSum", "name": "s", "fieldName": "f" * 1025}], "spec.dataSchema.metricsSpec[0].fieldName"),
    ("cardinality-fields", _set(*DS, "metricsSpec"),
     [{"type": "cardinality", "name": "c", "fields": _names("f", limits.MAX_CARDINALITY_FIELDS)}],
     [{"type": "cardinality", "name": "c", "fields": _names("f", limits.MAX_CARDINALITY_FIELDS + 1)}],
     "spec.dataSchema.metricsSpec[0].fields"),
    ("maxStringBytes", _set(*DS, "metricsSpec"),
     [{"type": "stringFirst", "name": "s", "fieldName": "v", "maxStringBytes": limits.MAX_STRING_BYTES}],
     [{"type": "stringFirst", "name": "s", "fieldName": "v", "maxStringBytes": limits.MAX_STRING_BYTES + 1}],
     "spec.dataSchema.metricsSpec[0].maxStringBytes"),
    ("transforms", _set(*TRANSFORM, "transforms"),
     [{"type": "expression", "name": n, "expression": "x"} for n in _names("t", limits.MAX_TRANSFORMS)],
     [{"type": "expression", "name": n, "expression": "x"} for n in _names("t", limits.MAX_TRANSFORMS + 1)],
     "spec.dataSchema.transformSpec.transforms"),
    ("expression-length", _set(*TRANSFORM, "transforms"),
     [{"type": "expression", "name": "t", "expression": "x" + " " * (limits.MAX_EXPRESSION_LENGTH - 1)}],
     [{"type": "expression", "name": "t", "expression": "x" + " " * limits.MAX_EXPRESSION_LENGTH}],
     "spec.dataSchema.transformSpec.transforms[0].expression"),
    ("expression-depth", _set(*TRANSFORM, "transforms"),
     [{"type": "expression", "name": "t", "expression": "x" + " + x" * (limits.MAX_EXPRESSION_DEPTH - 1)}],
     [{"type": "expression", "name": "t", "expression": "x" + " + x" * limits.MAX_EXPRESSION_DEPTH}],
     "spec.dataSchema.transformSpec.transforms[0].expression"),
    ("expression-nesting", _set(*TRANSFORM, "transforms"),
     [{"type": "expression", "name": "t", "expression": "-" * (limits.MAX_EXPRESSION_DEPTH - 1) + "x"}],
     [{"type": "expression", "name": "t", "expression": "-" * limits.MAX_EXPRESSION_DEPTH + "x"}],
     "spec.dataSchema.transformSpec.transforms[0].expression"),
    ("filter-depth", _set(*TRANSFORM, "filter"), _not(limits.MAX_FILTER_DEPTH), _not(limits.MAX_FILTER_DEPTH + 1),
     "spec.dataSchema.transformSpec.filter" + ".field" * limits.MAX_FILTER_DEPTH),
    ("filter-clauses", _set(*TRANSFORM, "filter"),
     {"type": "or", "fields": [_not(1)] * (limits.MAX_FILTER_CLAUSES - 1)},
     {"type": "or", "fields": [_not(1)] * limits.MAX_FILTER_CLAUSES}, "spec.dataSchema.transformSpec.filter"),
    ("filter-values", _set(*TRANSFORM, "filter"),
     {"type": "in", "dimension": "country", "values": _names("v", limits.MAX_FILTER_VALUES)},
     {"type": "in", "dimension": "country", "values": _names("v", limits.MAX_FILTER_VALUES + 1)},
     "spec.dataSchema.transformSpec.filter.values"),
    ("search-filter-fragments", _set(*TRANSFORM, "filter"),
     {"type": "search", "dimension": "country", "query": {"type": "fragment",
                                                          "values": _names("v", limits.MAX_FILTER_VALUES)}},
     {"type": "search", "dimension": "country", "query": {"type": "fragment",
                                                          "values": _names("v", limits.MAX_FILTER_VALUES + 1)}},
     "spec.dataSchema.transformSpec.filter.query.values"),
    ("filter-pattern", _set(*TRANSFORM, "filter"),
     {"type": "like", "dimension": "country", "pattern": "%" * limits.MAX_PATTERN_LENGTH},
     {"type": "like", "dimension": "country", "pattern": "%" * (limits.MAX_PATTERN_LENGTH + 1)},
     "spec.dataSchema.transformSpec.filter.pattern"),
    ("filtered-aggregator-depth", _set(*DS, "metricsSpec"),
     [{"type": "filtered", "filter": _not(limits.MAX_FILTER_DEPTH), "aggregator": {"type": "count", "name": "c"}}],
     [{"type": "filtered", "filter": _not(limits.MAX_FILTER_DEPTH + 1), "aggregator": {"type": "count", "name": "c"}}],
     "spec.dataSchema.metricsSpec[0].filter" + ".field" * limits.MAX_FILTER_DEPTH),
    ("flattenSpec-fields", _set(*IO, "inputFormat"),
     {"type": "json", "flattenSpec": {"fields": [{"type": "root", "name": n} for n in
                                                 _names("f", limits.MAX_FLATTEN_FIELDS)]}},
     {"type": "json", "flattenSpec": {"fields": [{"type": "root", "name": n} for n in
                                                 _names("f", limits.MAX_FLATTEN_FIELDS + 1)]}},
     "spec.ioConfig.inputFormat.flattenSpec.fields"),
    ("flattenSpec-expr", _set(*IO, "inputFormat"),
     {"type": "json", "flattenSpec": {"fields": [{"type": "path", "name": "p",
                                                  "expr": "$." + "a" * (limits.MAX_PATH_LENGTH - 2)}]}},
     {"type": "json", "flattenSpec": {"fields": [{"type": "path", "name": "p",
                                                  "expr": "$." + "a" * (limits.MAX_PATH_LENGTH - 1)}]}},
     "spec.ioConfig.inputFormat.flattenSpec.fields[0].expr"),
    ("csv-columns", _set(*IO, "inputFormat", example="csv"),
     {"type": "csv", "columns": ["timestamp", "page", "language", "user",
                                 *_names("c", limits.MAX_INPUT_COLUMNS - 4)]},
     {"type": "csv", "columns": ["timestamp", "page", "language", "user",
                                 *_names("c", limits.MAX_INPUT_COLUMNS - 3)]},
     "spec.ioConfig.inputFormat.columns"),
    ("listDelimiter", _set(*IO, "inputFormat", example="csv"),
     {"type": "csv", "columns": ["timestamp", "page", "language", "user"], "listDelimiter": "|" * 100},
     {"type": "csv", "columns": ["timestamp", "page", "language", "user"], "listDelimiter": "|" * 101},
     "spec.ioConfig.inputFormat.listDelimiter"),
    ("kafka-metadata-column", _set(*IO, "inputFormat"),
     {"type": "kafka", "valueFormat": {"type": "json"}, "topicColumnName": "t" * limits.MAX_NAME_LENGTH},
     {"type": "kafka", "valueFormat": {"type": "json"}, "topicColumnName": "t" * (limits.MAX_NAME_LENGTH + 1)},
     "spec.ioConfig.inputFormat.topicColumnName"),
    ("segmentGranularity", _segment_at, "SECOND", {"type": "duration", "duration": 999},
     "spec.dataSchema.granularitySpec.segmentGranularity"),
    ("maxRowsPerSegment", _set(*TU, "maxRowsPerSegment"), limits.JAVA_INT_MAX, limits.JAVA_INT_MAX + 1,
     "spec.tuningConfig.maxRowsPerSegment"),
    ("maxRowsInMemory", _set(*TU, "maxRowsInMemory"), limits.JAVA_INT_MAX, limits.JAVA_INT_MAX + 1,
     "spec.tuningConfig.maxRowsInMemory"),
    ("maxParseExceptions", _set(*TU, "maxParseExceptions"), limits.JAVA_INT_MAX, 10**30,
     "spec.tuningConfig.maxParseExceptions"),
    ("maxSavedParseExceptions", _set(*TU, "maxSavedParseExceptions"), limits.MAX_SAVED_PARSE_EXCEPTIONS,
     limits.MAX_SAVED_PARSE_EXCEPTIONS + 1, "spec.tuningConfig.maxSavedParseExceptions"),
]


@pytest.mark.parametrize(("make", "at_limit", "past", "path"), [case[1:] for case in BOUNDS],
                         ids=[case[0] for case in BOUNDS])
def test_each_bound_is_accepted_at_the_limit_and_refused_past_it(
        make: Callable[[Any], Doc], at_limit: Any, past: Any, path: str) -> None:
    load_supervisor_spec(make(at_limit))
    errors = errors_of(make(past))
    assert [p for p, _ in errors] == [path], errors
    assert "limit of this service" in errors[0][1] or "at most" in errors[0][1], errors


def test_the_example_specs_and_the_defaults_are_within_the_limits() -> None:
    for name in ("events", "wikipedia", "csv", "flatten", "transform", "avro", "sketches", "discovery",
                 "typed-discovery"):
        load_supervisor_spec(example_json(name))


# --------------------------------------------------------------------------- loop isolation

def test_a_busy_supervisor_does_not_hold_up_another_supervisors_publish(stack, make_topic, make_overlord):
    """A supervisor whose run takes long (here: its lock held, as a long ``run_once`` holds it) while an
    update of its spec waits for it, with the largest taskCount * replicas allowed: another supervisor
    still publishes what arrives on its topic, within seconds.

    Before, the update waited for the busy supervisor under the overlord's lock, which every other
    supervisor's run (and every task's completion) took too: all of them stopped until the busy run ended.
    """
    overlord = make_overlord()
    busy_topic, other_topic = make_topic(1), make_topic(1)
    busy_ds, other_ds = f"busy_{time.monotonic_ns()}", f"other_{time.monotonic_ns()}"
    biggest = {"taskCount": limits.MAX_TASKS // limits.MAX_REPLICAS, "replicas": limits.MAX_REPLICAS}
    overlord.submit(spec_json(busy_ds, busy_topic, **biggest))
    overlord.submit(spec_json(other_ds, other_topic))
    busy = overlord.get(busy_ds)
    update = threading.Thread(target=overlord.submit, args=(spec_json(busy_ds, busy_topic, **biggest),), daemon=True)
    sample = make_sample_events(500)
    with busy.lock:  # what a long run_once holds for its whole pass
        update.start()
        time.sleep(0.5)  # the update now waits for the busy supervisor
        assert update.is_alive()
        produce(stack.bootstrap_servers, other_topic, sample.records, 1)
        wait_until(lambda: committed_total(overlord.engine, other_ds) == len(sample.records),
                   "the other supervisor to publish while the busy one runs", timeout_s=60)
    update.join(timeout=30)
    assert not update.is_alive()


@pytest.mark.parametrize("levels", [300, 100_000])
def test_a_spec_nested_past_the_json_depth_limit_is_refused_not_a_crash(levels: int) -> None:
    """300 levels passed validation and broke serialisation (a 500); 100,000 broke the JSON decoder itself."""
    doc = example_json("events")
    text = json.dumps(doc)[:-1] + ', "context": ' + "[" * levels + "]" * levels + "}"
    with pytest.raises(SpecError) as refused:
        load_supervisor_spec(text)
    assert refused.value.errors == [("$", f"nests objects and arrays more than {limits.MAX_JSON_DEPTH} levels deep "
                                          "(a limit of this service)")]
    doc["context"] = {"a": [{"b": 1}]}  # a little nesting is fine
    load_supervisor_spec(doc)
