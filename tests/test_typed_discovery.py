"""Typed schema discovery (``useSchemaDiscovery``): each discovered field is a LONG, DOUBLE or STRING column,
the least restrictive type of its values; segments of one column in different types are widened by queries
and by compaction to the same answers.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow.parquet as pq
import pytest

from indexing_task.compaction_job import compact
from indexing_task.rollup import Rollup
from indexing_task.rollup_schema import RollupSchema
from overlord.dev.sample_data import produce
from overlord.http.status_payloads import status_payload
from overlord.query.engine import execute_sql
from segment_store.timeline import visible_segments
from segment_store.value_types import widest_types
from specs import load_supervisor_spec
from tests.helpers import committed_total, wait_until


def typed_spec(datasource: str = "typed", topic: str = "typed", **dimensions: Any) -> dict[str, Any]:
    return {"type": "kafka", "spec": {
        "dataSchema": {
            "dataSource": datasource,
            "timestampSpec": {"column": "t", "format": "iso"},
            "dimensionsSpec": {"useSchemaDiscovery": True, "dimensions": [], **dimensions},
            "metricsSpec": [{"type": "count", "name": "count"}, {"type": "longSum", "name": "v", "fieldName": "v"}],
            "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "HOUR", "rollup": True}},
        "ioConfig": {"topic": topic, "inputFormat": {"type": "json"}, "useEarliestOffset": True, "period": "PT1S"}}}


def encoded(records: list[dict[str, Any]]) -> list[bytes]:
    return [json.dumps({"t": "2024-05-01T10:00:00Z", **r}).encode() for r in records]


def test_each_field_is_typed_by_the_least_restrictive_of_its_values() -> None:
    """Integers are LONG (booleans 1/0, as Druid's strict booleans), any fraction makes DOUBLE, any text STRING;
    a later batch widens a type and earlier rows follow; a listed dimension keeps its type; exclusions hold.
    """
    spec = load_supervisor_spec(typed_spec(dimensions=[{"name": "code", "type": "string"}],
                                           dimensionExclusions=["debug"]))
    rollup = Rollup(RollupSchema.from_spec(spec.spec.data_schema))
    first = rollup.parse(encoded([
        {"n": 1, "ok": True, "x": 1, "big": 2**64 - 1, "code": 7, "debug": "no", "v": 1},
        {"n": 2, "ok": False, "x": 2.5, "s": "a", "code": 8, "v": 2}]))
    assert first.bad_count == 0, first.bad_samples
    assert rollup.schema.discovered_types == {"big": "double", "n": "long", "ok": "long", "s": "string",
                                              "x": "double"}
    second = rollup.parse(encoded([{"n": "seven", "x": 1e20, "s": 3, "v": 3}, {"n": None, "x": 5, "v": 4}]))
    assert rollup.schema.discovered_types["n"] == "string" and rollup.schema.discovered_types["x"] == "double"
    merged = rollup.merge([first.rows, second.rows])
    assert {f.name: str(f.type) for f in merged.schema if f.name in ("n", "ok", "x", "code", "s")} == {
        "code": "string", "n": "string", "ok": "int64", "s": "string", "x": "double"}
    assert sorted(((r["n"], r["ok"], r["x"], r["s"], r["code"]) for r in merged.to_pylist()), key=repr) == sorted([
        ("1", 1, 1.0, None, "7"), ("2", 0, 2.5, "a", "8"), ("seven", None, 1e20, "3", None),
        (None, None, 5.0, None, None)], key=repr)
    assert "debug" not in merged.column_names


def test_a_double_widened_to_a_string_reads_as_a_query_would_widen_it() -> None:
    rollup = Rollup(RollupSchema.from_spec(load_supervisor_spec(typed_spec()).spec.data_schema))
    first = rollup.parse(encoded([{"score": 5.0, "v": 1}, {"score": 1e20, "v": 1}, {"score": 0.5, "v": 1}]))
    second = rollup.parse(encoded([{"score": "high", "v": 1}]))
    scores = sorted(r["score"] for r in rollup.merge([first.rows, second.rows]).to_pylist())
    assert scores == ["0.5", "1.0E20", "5.0", "high"]  # Spark's (Java's) text of each double


def test_the_values_do_not_depend_on_how_records_fall_into_batches() -> None:
    """A boolean is 1/0 and a double Java's text in a STRING column, whether it was one from the start of the
    batch or widened to one later (and so in a query or after compaction). Not covered: an integer in a batch
    that made the column DOUBLE reads 1.0 once widened (README, Specs).
    """
    records = [{"x": True, "v": 1}, {"x": 1e20, "v": 1}, {"x": 0.0001, "v": 1}, {"x": 12345678.9, "v": 1},
               {"x": 2.5, "v": 1}, {"x": "yes", "v": 1}, {"x": False, "v": 1}]

    def stored(batches: list[list[dict[str, Any]]]) -> list[Any]:
        rollup = Rollup(RollupSchema.from_spec(load_supervisor_spec(typed_spec()).spec.data_schema))
        merged = rollup.merge([rollup.parse(encoded(batch)).rows for batch in batches])
        return sorted(r["x"] for r in merged.to_pylist())

    expected = sorted(["1", "1.0E20", "1.0E-4", "1.23456789E7", "2.5", "yes", "0"])
    assert stored([records]) == expected
    assert stored([[r] for r in records]) == expected
    assert stored([records[:1], records[1:5], records[5:]]) == expected  # LONG, DOUBLE, then STRING


def test_a_nested_value_is_unparseable_naming_the_field_and_the_rest_goes_on() -> None:
    rollup = Rollup(RollupSchema.from_spec(load_supervisor_spec(typed_spec()).spec.data_schema))
    parsed = rollup.parse(encoded([{"page": "a", "tags": ["x", "y"], "v": 1}, {"page": "b", "geo": {"c": "NL"}, "v": 1},
                                   {"page": "c", "tags": "z", "v": 1}]))
    assert [(b.index, b.reason.split(":")[0]) for b in parsed.bad_samples] == [
        (0, "field tags holds a JSON array or object"), (1, "field geo holds a JSON array or object")]
    assert "not supported" in parsed.bad_samples[0].reason
    assert [(r["page"], r["tags"]) for r in parsed.rows.to_pylist()] == [("c", "z")]


def test_typed_columns_through_the_broker_widen_in_queries_and_compaction_alike(
        stack, spark, make_topic, datasource, deep_storage, make_overlord):
    """Three tasks, three segments holding ``n`` as LONG, DOUBLE (same hour) and STRING (the next hour):
    queries read it as STRING; compacting the first hour writes it as STRING too, so no answer changes.
    """
    topic = make_topic(1)
    overlord = make_overlord()
    engine = overlord.engine
    raw = typed_spec(datasource, topic)
    overlord.submit(raw)
    batches = [[{"page": "a", "n": 1, "price": 1.5, "ok": True, "score": 5.0, "v": 1},
                {"page": "b", "n": 2, "price": 2, "ok": False, "score": 1e20, "v": 2}],
               [{"page": "c", "n": 2.5, "price": 1e20, "ok": True, "score": "high", "v": 3}, {"page": "d", "v": 4}],
               [{"t": "2024-05-01T11:00:00Z", "page": "e", "n": "seven", "v": 5}]]
    produced = 0
    for batch in batches:  # a task (or two, if the supervisor sees a batch half produced) per batch
        produce(stack.bootstrap_servers, topic, encoded(batch), 1)
        produced += len(batch)
        wait_until(lambda n=produced: committed_total(engine, datasource) == n, "the batch committed")
    segments = visible_segments(engine, datasource)
    assert {s.descriptor["discovered_types"].get("n") for s in segments} - {None} == {"long", "double", "string"}
    sup = overlord.get(datasource)
    wait_until(lambda: sup.status.counters.processed == produced, "the finished tasks handled")
    assert {c["name"]: c["type"] for c in status_payload(sup.status)["payload"]["discoveredSchema"]} == {
        "n": "STRING", "ok": "LONG", "page": "STRING", "price": "DOUBLE", "score": "STRING"}

    def answers() -> list[list[dict[str, Any]]]:
        return [execute_sql(spark, engine, query.format(ds=f'"{datasource}"')).table.to_pylist() for query in (
            "SELECT page, n, price, ok, score FROM {ds} ORDER BY page",
            "SELECT SUM(price) AS price, SUM(ok) AS ok, SUM(v) AS v FROM {ds}",
            "SELECT page FROM {ds} WHERE n IN ('1', '2.5', 'seven') ORDER BY page")]

    expected = [[{"page": "a", "n": "1", "price": 1.5, "ok": 1, "score": "5.0"},
                 {"page": "b", "n": "2", "price": 2.0, "ok": 0, "score": "1.0E20"},
                 {"page": "c", "n": "2.5", "price": 1e20, "ok": 1, "score": "high"},
                 {"page": "d", "n": None, "price": None, "ok": None, "score": None},
                 {"page": "e", "n": "seven", "price": None, "ok": None, "score": None}],
                [{"price": 1e20 + 3.5, "ok": 2, "v": 15}],
                [{"page": "a"}, {"page": "c"}, {"page": "e"}]]
    assert answers() == expected
    overlord.set_suspended(datasource, True)
    reports = compact(spark, engine, load_supervisor_spec(raw), deep_storage, storage_options=None)
    assert len(reports) == 1 and reports[0].outcome.ok  # the first hour: two segments or more
    compacted = visible_segments(engine, datasource)[0]
    assert compacted.descriptor["discovered_types"] == {"n": "string", "ok": "long", "page": "string",
                                                        "price": "double", "score": "string"}
    assert str(pq.read_schema(compacted.path).field("n").type) == "string"
    assert answers() == expected


def test_files_that_disagree_on_a_listed_columns_type_fail_compaction_naming_it(tmp_path) -> None:
    """``n`` was discovered as text, then listed as a LONG: compaction cannot merge the two, and says so."""
    from datetime import UTC, datetime

    import pyarrow as pa

    from indexing_task.compaction_job import CompactionError, _compact_interval, _IntervalInput, _Payload

    schema = RollupSchema.from_spec(load_supervisor_spec(typed_spec(dimensions=[
        {"name": "n", "type": "long"}])).spec.data_schema)
    start, end = datetime(2024, 5, 1, 10, tzinfo=UTC), datetime(2024, 5, 1, 11, tzinfo=UTC)
    paths = []
    for i, n in enumerate([pa.array(["seven"]), pa.array([7])]):
        paths.append(str(tmp_path / f"{i}.parquet"))
        pq.write_table(pa.table({"__time": pa.array([start], pa.timestamp("ms", tz="UTC")), "n": n,
                                 "count": pa.array([1]), "v": pa.array([1])}), paths[-1])
    payload = _Payload(job_id="j", datasource="d", rollup_schema=schema, deep_storage=str(tmp_path),
                       max_rows_per_segment=100, intervals=(_IntervalInput(start=start, end=end, paths=tuple(paths)),))
    with pytest.raises(CompactionError, match="disagree on a column's type .*Field n has incompatible types"):
        _compact_interval(payload, 0, 0)


def test_a_kafka_timestamp_is_a_discovered_long_and_listed_types_widen_too() -> None:
    """Typed discovery makes the Kafka timestamp column a LONG that segments record as discovered (so files of a
    string-discovery spec before are widened, not mixed); a FLOAT listed in one spec merges with a LONG.
    """
    raw = typed_spec()
    raw["spec"]["ioConfig"]["inputFormat"] = {"type": "kafka", "valueFormat": {"type": "json"}}
    spec = load_supervisor_spec(raw)
    schema = RollupSchema.from_spec(spec.spec.data_schema, spec.spec.io_config.input_format)
    assert schema.discovered_types == {"kafka.timestamp": "long", "kafka.topic": "string"}
    assert widest_types([{"x": "long"}, {"x": "float"}, {"y": "float"}]) == {"x": "float", "y": "float"}
