"""First/last aggregators: (time, value) pairs by the record's own time, merged at rollup and compaction."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from indexing_task.compaction_job import compact
from indexing_task.rollup import Rollup
from indexing_task.rollup_schema import RollupSchema
from overlord.dev.sample_data import produce
from overlord.query.engine import execute_sql, run_sql
from overlord.query.native import run_native
from overlord.query.query_errors import QueryError
from overlord.supervisor.task_ranges import index_once
from segment_store import visible_segments
from specs import SpecError, load_supervisor_spec
from tests.helpers import settings_for

MINUTE = 60_000


def first_last_spec(datasource: str = "firstlast", topic: str = "firstlast") -> dict[str, Any]:
    return {"type": "kafka", "spec": {
        "dataSchema": {
            "dataSource": datasource,
            "timestampSpec": {"column": "ts", "format": "millis"},
            "dimensionsSpec": {"dimensions": ["sensor"]},
            "metricsSpec": [{"type": "count", "name": "count"},
                            {"type": "longFirst", "name": "first_reading", "fieldName": "reading"},
                            {"type": "longLast", "name": "last_reading", "fieldName": "reading"},
                            {"type": "doubleLast", "name": "last_temp", "fieldName": "temp"},
                            {"type": "stringFirst", "name": "first_status", "fieldName": "status",
                             "maxStringBytes": 3},
                            {"type": "stringLast", "name": "last_status", "fieldName": "status"}],
            "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "HOUR"}},
        "ioConfig": {"topic": topic, "inputFormat": {"type": "json"}, "useEarliestOffset": True}}}


def record(minute: int, sensor: str = "s1", **fields: Any) -> bytes:
    return json.dumps({"ts": 1_700_000_000_000 // 3_600_000 * 3_600_000 + minute * MINUTE, "sensor": sensor,
                       **fields}).encode()


BATCHES = [  # out of time order, across batches: the record's own time decides, not arrival
    [record(30, reading=5, temp=1.5, status="üüber"), record(10, reading=None, temp=2.5, status=None)],
    [record(50, reading=7, temp=None, status="late"), record(20, reading=3, temp=0.5, status="ok")],
    [record(40, reading=None, temp=4.0)],
]


def test_first_and_last_take_the_values_of_the_earliest_and_latest_records_as_druid_does():
    spec = load_supervisor_spec(first_last_spec())
    rollup = Rollup(RollupSchema.from_spec(spec.spec.data_schema))
    [row] = rollup.merge([rollup.parse(batch).rows for batch in BATCHES]).to_pylist()
    base = record(0)
    start = json.loads(base)["ts"]
    assert row["count"] == 5
    assert row["first_reading"] == {"lhs": start + 10 * MINUTE, "rhs": None, "offset": 1}  # a null number is a value
    assert row["last_reading"] == {"lhs": start + 50 * MINUTE, "rhs": 7, "offset": 0}
    assert row["last_temp"] == {"lhs": start + 50 * MINUTE, "rhs": None, "offset": 0}
    assert row["first_status"] == {"lhs": start + 20 * MINUTE, "rhs": "ok", "offset": 1}  # a null string is skipped
    assert row["last_status"] == {"lhs": start + 50 * MINUTE, "rhs": "late", "offset": 0}
    [cut] = rollup.parse([record(1, status="üüber")]).rows.to_pylist()
    assert cut["first_status"]["rhs"] == "üüb"  # maxStringBytes 3: characters, as Druid's ingestion cuts
    [tied] = rollup.parse([record(1, status="abc"), record(1, status="def")]).rows.to_pylist()
    assert (tied["first_status"]["rhs"], tied["last_status"]["rhs"]) == ("abc", "def")  # Druid: < and >=


@pytest.mark.parametrize(("change", "path", "message"), [
    ({"timeColumn": "other"}, "timeColumn", "__time"),
    ({"maxStringBytes": 10}, "maxStringBytes", "only a stringFirst or stringLast aggregator"),
    ({"fieldName": None, "type": "cardinality", "fields": []}, "fields", "at least 1"),
])
def test_first_last_fields_we_do_not_implement_are_refused(change, path, message):
    raw = first_last_spec()
    raw["spec"]["dataSchema"]["metricsSpec"][1].update(change)
    with pytest.raises(SpecError) as refused:
        load_supervisor_spec(raw)
    [(found, text)] = refused.value.errors
    assert found == f"spec.dataSchema.metricsSpec[1].{path}" and message in text


def test_first_last_through_the_broker_answer_earliest_and_latest_and_survive_compaction(
        stack, engine, spark, make_topic, datasource, deep_storage):
    topic = make_topic(1)
    spec = load_supervisor_spec(first_last_spec(datasource, topic))
    settings = settings_for(stack, deep_storage)
    for batch in BATCHES:  # one task each: three generations of segments in the hour
        produce(stack.bootstrap_servers, topic, [*batch, record(0, sensor="s2", reading=1, status="a")], 1)
        assert index_once(spark, engine, settings, spec).outcome.status == "ok"
    query = f'''SELECT sensor, EARLIEST(first_reading) AS fr, LATEST(last_reading) AS lr, LATEST(last_temp) AS lt,
                       EARLIEST(first_status) AS fs, LATEST_BY(last_status, __time) AS ls, SUM("count") AS n
                FROM "{datasource}" GROUP BY sensor ORDER BY sensor'''
    expected = [{"sensor": "s1", "fr": None, "lr": 7, "lt": None, "fs": "ok", "ls": "late", "n": 5},
                {"sensor": "s2", "fr": 1, "lr": 1, "lt": None, "fs": "a", "ls": "a", "n": 3}]
    assert execute_sql(spark, engine, query).table.to_pylist() == expected
    native = run_native(spark, engine, {
        "queryType": "groupBy", "dataSource": datasource, "granularity": "all", "intervals": ["2000/3000"],
        "dimensions": ["sensor"], "aggregations": [{"type": "longLast", "name": "lr", "fieldName": "last_reading"},
                                                  {"type": "stringFirst", "name": "fs", "fieldName": "first_status"}]})
    assert [r["event"] for r in native] == [{k: row[k] for k in ("sensor", "lr", "fs")} for row in expected]
    stored = run_sql(spark, engine, f'SELECT last_reading FROM "{datasource}" WHERE sensor = \'s1\' LIMIT 1')
    assert set(stored[0]["last_reading"]) == {"lhs", "rhs", "offset"}  # Druid's pair, and the record's offset
    reports = compact(spark, engine, spec, deep_storage, storage_options=None)
    assert reports and all(r.outcome.ok for r in reports)
    assert execute_sql(spark, engine, query).table.to_pylist() == expected
    cut = f'SELECT EARLIEST(first_status, 1) AS fs FROM "{datasource}" WHERE sensor = \'s1\''
    assert execute_sql(spark, engine, cut).table.to_pylist() == [{"fs": "o"}]  # maxBytes cuts when querying too
    with pytest.raises(QueryError, match="a column of first/last values: use EARLIEST or LATEST"):
        execute_sql(spark, engine, f'SELECT COUNT(DISTINCT last_status) FROM "{datasource}"')
    for hidden in (f'SELECT MAX(r) FROM (SELECT last_reading AS r FROM "{datasource}")',
                   f'SELECT COUNT(DISTINCT s) FROM (SELECT last_status AS s FROM "{datasource}")'):
        with pytest.raises(QueryError, match="over stored sketches or first/last pairs"):
            execute_sql(spark, engine, hidden)


def test_ties_on_time_go_to_the_later_offset_whatever_the_tasks_and_compaction(
        stack, engine, spark, make_topic, datasource, deep_storage):
    """Records of one millisecond in two tasks: LATEST is the later record's, EARLIEST the earlier's, always."""
    topic = make_topic(1)
    spec = load_supervisor_spec(first_last_spec(datasource, topic))
    settings = settings_for(stack, deep_storage)
    tasks = [{"s1": "aaa", "s2": "zzz", "s3": "mmm"}, {"s1": "zzz", "s2": "aaa", "s3": "mmm"}]
    for statuses in tasks:  # one task each; s3 ties on the value too, told apart by its reading
        produce(stack.bootstrap_servers, topic, [
            record(1, sensor=sensor, status=status, reading=n, temp=float(n))
            for n, (sensor, status) in enumerate(statuses.items(), len(statuses) * tasks.index(statuses))], 1)
        assert index_once(spark, engine, settings, spec).outcome.status == "ok"
    query = f'''SELECT sensor, EARLIEST(first_status) AS fs, LATEST(last_status) AS ls, EARLIEST(first_reading) AS fr,
                       LATEST(last_reading) AS lr, LATEST(last_temp) AS lt
                FROM "{datasource}" GROUP BY sensor ORDER BY sensor'''
    expected = [{"sensor": "s1", "fs": "aaa", "ls": "zzz", "fr": 0, "lr": 3, "lt": 3.0},
                {"sensor": "s2", "fs": "zzz", "ls": "aaa", "fr": 1, "lr": 4, "lt": 4.0},
                {"sensor": "s3", "fs": "mmm", "ls": "mmm", "fr": 2, "lr": 5, "lt": 5.0}]
    assert execute_sql(spark, engine, query).table.to_pylist() == expected
    native = run_native(spark, engine, {
        "queryType": "groupBy", "dataSource": datasource, "granularity": "all", "intervals": ["2000/3000"],
        "dimensions": ["sensor"], "aggregations": [{"type": "stringLast", "name": "ls", "fieldName": "last_status"},
                                                  {"type": "longFirst", "name": "fr", "fieldName": "first_reading"}]})
    assert [r["event"] for r in native] == [{k: row[k] for k in ("sensor", "ls", "fr")} for row in expected]
    assert all(r.outcome.ok for r in compact(spark, engine, spec, deep_storage, storage_options=None))
    assert execute_sql(spark, engine, query).table.to_pylist() == expected


def without_offsets(path: str) -> None:
    """Rewrite a segment file as versions before stored offsets wrote it: pairs of (lhs, rhs) only."""
    table = pq.read_table(path)
    for i, field in enumerate(table.schema):
        if pa.types.is_struct(field.type) and field.type.names == ["lhs", "rhs", "offset"]:
            old = pa.struct([field.type.field("lhs"), field.type.field("rhs")])
            table = table.set_column(i, field.name, table.column(i).cast(old))
    pq.write_table(table, path)


def test_pairs_written_before_offsets_were_stored_still_answer_and_compact(
        stack, engine, spark, make_topic, datasource, deep_storage):
    topic = make_topic(1)
    spec = load_supervisor_spec(first_last_spec(datasource, topic))
    settings = settings_for(stack, deep_storage)
    query = (f'SELECT EARLIEST(first_status) AS fs, LATEST(last_status) AS ls, LATEST(last_reading) AS lr '
             f'FROM "{datasource}"')
    for minute, status in ((10, "b"), (30, "c")):
        produce(stack.bootstrap_servers, topic, [record(minute, status=status, reading=minute)], 1)
        assert index_once(spark, engine, settings, spec).outcome.status == "ok"
    for segment in visible_segments(engine, datasource):
        without_offsets(segment.path)
    assert execute_sql(spark, engine, query).table.to_pylist() == [{"fs": "b", "ls": "c", "lr": 30}]
    produce(stack.bootstrap_servers, topic, [record(20, status="a", reading=20)], 1)
    assert index_once(spark, engine, settings, spec).outcome.status == "ok"
    assert execute_sql(spark, engine, query).table.to_pylist() == [{"fs": "b", "ls": "c", "lr": 30}]
    assert all(r.outcome.ok for r in compact(spark, engine, spec, deep_storage, storage_options=None))
    assert execute_sql(spark, engine, query).table.to_pylist() == [{"fs": "b", "ls": "c", "lr": 30}]
