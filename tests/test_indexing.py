"""End to end on the real broker, PostgreSQL and local Spark: produce, index, read the Parquet back,
each test on a local segment root and on S3 (moto).
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka import Producer

from indexing_task.compaction_job import compact
from indexing_task.task import IndexTaskRequest, run_index_task
from indexing_task.task_errors import TooManyParseErrors
from overlord.dev.sample_data import make_sample_events, produce
from overlord.supervisor.task_ranges import index_once, next_task_request
from segment_store import DeepStorage, committed_offsets, reset_offsets, used_segments
from specs import SupervisorSpec, load_supervisor_spec
from tests.helpers import (
    ON_EVERY_DEEP_STORAGE,
    assert_exact,
    events_spec,
    merged,
    published_table,
    read_bytes,
    settings_for,
    spec_json,
)

pytestmark = ON_EVERY_DEEP_STORAGE


def test_index_publishes_exact_counts_and_sums(stack, engine, spark, make_topic, datasource, deep_storage):
    topic = make_topic(3)
    sample = make_sample_events(30_000, bad_every=1_000)
    produce(stack.bootstrap_servers, topic, sample.records, 3)
    settings = settings_for(stack, deep_storage)

    report = index_once(spark, engine, settings, events_spec(datasource, topic))

    assert report.outcome.status == "ok", report.outcome.message
    assert report.records == len(sample.records)
    assert report.unparseable == sample.bad == 30
    assert {s["reason"] for s in report.bad_samples} == {"invalid JSON", "missing timestamp"}
    assert_exact(published_table(engine, datasource), sample)
    stored = committed_offsets(engine, datasource)
    assert stored is not None and sum(stored.offsets.values()) == len(sample.records)
    # Rows were rolled up: one row per (minute, country, device) at most, per split and hour.
    assert report.rows_out < 30_000
    segments = used_segments(engine, datasource)
    assert all(seg.interval_end - seg.interval_start == timedelta(hours=1) for seg in segments)
    # Deep storage holds exactly the published files, under the datasource's directory.
    storage = DeepStorage(deep_storage)
    stored_files = storage.fs.find(f"{storage.root}/{datasource}", detail=True, refresh=True)
    assert {storage.fs._strip_protocol(seg.path): seg.size_bytes for seg in segments} == {
        name: info["size"] for name, info in stored_files.items()}


def test_incremental_runs_read_only_new_records(stack, engine, spark, make_topic, datasource, deep_storage):
    topic = make_topic(2)
    first, second = make_sample_events(5_000, seed=1), make_sample_events(7_000, seed=2)
    settings = settings_for(stack, deep_storage)
    spec = events_spec(datasource, topic)

    produce(stack.bootstrap_servers, topic, first.records, 2)
    assert index_once(spark, engine, settings, spec).records == len(first.records)
    produce(stack.bootstrap_servers, topic, second.records, 2)
    report = index_once(spark, engine, settings, spec)

    assert report.outcome.ok and report.records == len(second.records)
    assert_exact(published_table(engine, datasource), merged(first, second))


def test_a_task_read_to_the_end_commits_where_its_reads_ended(stack, engine, spark, make_topic, datasource,
                                                              deep_storage):
    """A quiet topic's task is planned without asking the broker: it reads each partition as far as it goes."""
    topic = make_topic(2)
    first, second = make_sample_events(40, seed=1, bad_every=0), make_sample_events(25, seed=2, bad_every=0)
    settings, spec = settings_for(stack, deep_storage), events_spec(datasource, topic)

    def to_the_end(at_most: int) -> IndexTaskRequest:
        planned = next_task_request(engine, settings, spec)
        return replace(planned, end_offsets={p: o + at_most for p, o in planned.start_offsets.items()},
                       read_to_end=True)

    produce(stack.bootstrap_servers, topic, first.records, 2)
    report = run_index_task(spark, engine, to_the_end(1_000))
    assert report.outcome.ok and report.records == 40 and sum(report.end_offsets.values()) == 40
    assert committed_offsets(engine, datasource).offsets == report.end_offsets

    produce(stack.bootstrap_servers, topic, second.records, 2)
    capped = run_index_task(spark, engine, to_the_end(5))  # at most 5 a partition, of 25 waiting
    assert capped.outcome.ok and capped.records == 10
    rest = run_index_task(spark, engine, to_the_end(1_000))
    assert rest.outcome.ok and rest.records == 15
    assert_exact(published_table(engine, datasource), merged(first, second))
    assert sum(committed_offsets(engine, datasource).offsets.values()) == 65

    idle = run_index_task(spark, engine, to_the_end(1_000))  # nothing came: it ends where it started
    assert idle.outcome.ok and idle.records == 0 and idle.end_offsets == idle.start_offsets
    assert sum(committed_offsets(engine, datasource).offsets.values()) == 65


def test_same_range_twice_publishes_once(stack, engine, spark, make_topic, datasource, deep_storage):
    topic = make_topic(2)
    sample = make_sample_events(6_000)
    produce(stack.bootstrap_servers, topic, sample.records, 2)
    request = next_task_request(engine, settings_for(stack, deep_storage), events_spec(datasource, topic))

    first = run_index_task(spark, engine, request)
    retry = run_index_task(spark, engine, replace(request, task_id=request.task_id + "-retry"))

    assert first.outcome.status == "ok"
    assert retry.outcome.status == "already_published"
    assert "expected" in retry.outcome.message and "found" in retry.outcome.message
    assert retry.segments, "the retry wrote files, which must stay unpublished orphans"
    # Same range, same segment ids and byte-identical files, under attempt-specific paths.
    first_files = {s.id: (s.path, read_bytes(s.path)) for s in first.segments}
    retry_files = {s.id: (s.path, read_bytes(s.path)) for s in retry.segments}
    assert first_files.keys() == retry_files.keys()
    for seg_id, (path, data) in first_files.items():
        assert retry_files[seg_id][0] != path and retry_files[seg_id][1] == data
    assert_exact(published_table(engine, datasource), sample)


def test_concurrent_replicas_exactly_one_publishes(stack, engine, spark, make_topic, datasource, deep_storage):
    topic = make_topic(2)
    sample = make_sample_events(20_000)
    produce(stack.bootstrap_servers, topic, sample.records, 2)
    request = next_task_request(engine, settings_for(stack, deep_storage), events_spec(datasource, topic))
    outcomes: list[str] = []
    errors: list[BaseException] = []

    def replica(n: int) -> None:
        try:
            report = run_index_task(spark, engine, replace(request, task_id=f"{request.task_id}-r{n}",
                                                           min_split_records=2_000))
            outcomes.append(report.outcome.status)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=replica, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)

    assert not errors, errors
    assert sorted(outcomes) == ["already_published", "ok"]
    assert_exact(published_table(engine, datasource), sample)


def test_partition_split_across_spark_tasks_is_exact(stack, engine, spark, make_topic, datasource,
                                                    deep_storage):
    topic = make_topic(1)
    sample = make_sample_events(12_000, bad_every=500)
    produce(stack.bootstrap_servers, topic, sample.records, 1)
    request = next_task_request(engine, settings_for(stack, deep_storage), events_spec(datasource, topic))

    report = run_index_task(spark, engine, replace(request, min_split_records=1_000))

    assert report.outcome.ok
    split_keys = {seg.id.rsplit("_", 2)[-2] for seg in report.segments}
    assert len(split_keys) > 1, "the single partition should have been read by several splits"
    assert report.unparseable == sample.bad
    assert_exact(published_table(engine, datasource), sample)


def test_a_small_range_over_several_partitions_is_one_spark_task_and_exact(stack, engine, spark, make_topic,
                                                                          datasource, deep_storage):
    topic = make_topic(3)
    sample = make_sample_events(900, bad_every=100)
    produce(stack.bootstrap_servers, topic, sample.records, 3)
    request = next_task_request(engine, settings_for(stack, deep_storage), events_spec(datasource, topic))

    report = run_index_task(spark, engine, request)

    tracker = spark.sparkContext.statusTracker()
    [job] = [tracker.getJobInfo(j) for j in tracker.getJobIdsForGroup(request.task_id)]  # a task's jobs are its group
    assert [tracker.getStageInfo(s).numTasks for s in job.stageIds] == [1]  # three splits, one Spark task
    intervals = {(seg.interval_start, seg.interval_end) for seg in report.segments}
    assert report.outcome.ok and len(report.segments) == len(intervals) == 2  # parsed as one: a file per interval
    assert len({seg.id.rsplit("_", 2)[-2] for seg in report.segments}) == 1
    assert_exact(published_table(engine, datasource), sample)


def test_too_many_parse_errors_fails_and_publishes_nothing(stack, engine, spark, make_topic, datasource,
                                                          deep_storage):
    topic = make_topic(1)
    sample = make_sample_events(2_000, bad_every=100)
    produce(stack.bootstrap_servers, topic, sample.records, 1)
    spec = events_spec(datasource, topic, maxParseExceptions=5)

    with pytest.raises(TooManyParseErrors, match="20 unparseable records, maxParseExceptions is 5"):
        index_once(spark, engine, settings_for(stack, deep_storage), spec)

    assert used_segments(engine, datasource) == []
    stored = committed_offsets(engine, datasource)  # only the pinned starting offsets: nothing advanced
    assert stored is not None and dict(stored.offsets) == {0: 0}


def test_rollup_false_keeps_every_row(stack, engine, spark, make_topic, datasource, deep_storage):
    topic = make_topic(1)
    sample = make_sample_events(3_000, bad_every=0)
    produce(stack.bootstrap_servers, topic, sample.records, 1)
    raw = events_spec(datasource, topic).to_druid_json()
    raw["spec"]["dataSchema"]["granularitySpec"].update(rollup=False, queryGranularity="NONE")
    report = index_once(spark, engine, settings_for(stack, deep_storage), load_supervisor_spec(raw))

    assert report.outcome.ok and report.rows_out == 3_000
    table = published_table(engine, datasource)
    assert set(table.column("count").to_pylist()) == {1}
    assert_exact(table, sample)


def test_empty_topic_publishes_initial_offsets(stack, engine, spark, make_topic, datasource, deep_storage):
    topic = make_topic(2)
    request: IndexTaskRequest = next_task_request(engine, settings_for(stack, deep_storage),
                                                  events_spec(datasource, topic))
    report = run_index_task(spark, engine, request)
    assert report.outcome.ok and report.records == 0 and report.segments == ()
    stored = committed_offsets(engine, datasource)
    assert stored is not None and dict(stored.offsets) == {0: 0, 1: 0}


def test_reset_reindexes_from_initial_offsets(stack, engine, spark, make_topic, datasource, deep_storage):
    """Druid's reset: offsets forgotten, the topic read again from the start under new segment ids."""
    topic = make_topic(2)
    sample = make_sample_events(4_000)
    produce(stack.bootstrap_servers, topic, sample.records, 2)
    settings, spec = settings_for(stack, deep_storage), events_spec(datasource, topic)
    first = index_once(spark, engine, settings, spec)

    reset_offsets(engine, datasource, None)
    again = index_once(spark, engine, settings, spec)

    assert first.outcome.ok and again.outcome.ok, again.outcome.message
    assert again.records == len(sample.records)
    assert {s.id for s in first.segments}.isdisjoint(s.id for s in again.segments)
    assert sum(published_table(engine, datasource).column("count").to_pylist()) == 2 * sum(
        sample.count_by_country.values())


def test_a_transform_filter_publishes_only_what_it_keeps(stack, engine, spark, make_topic, datasource, deep_storage):
    """Records the transformSpec filter drops are counted as thrown away; the rest are published exactly."""
    topic = make_topic(2)
    sample = make_sample_events(10_000, bad_every=10**9)
    produce(stack.bootstrap_servers, topic, sample.records, 2)
    raw = spec_json(datasource, topic)
    raw["spec"]["dataSchema"]["transformSpec"] = {"filter": {"type": "and", "fields": [
        {"type": "in", "dimension": "country", "values": ["DE", "FR"]},
        {"type": "bound", "dimension": "value", "lower": "0", "ordering": "numeric"}]}}

    report = index_once(spark, engine, settings_for(stack, deep_storage), load_supervisor_spec(raw))

    kept = [json.loads(r) for r in sample.records]
    kept = [r for r in kept if r["country"] in ("DE", "FR") and r["value"] >= 0]
    assert 0 < len(kept) < len(sample.records)
    assert (report.records, report.thrown_away, report.unparseable) == (len(sample.records),
                                                                     len(sample.records) - len(kept), 0)
    table = published_table(engine, datasource).to_pylist()
    assert sum(r["count"] for r in table) == len(kept)
    assert sum(r["value_sum"] for r in table) == sum(r["value"] for r in kept)
    assert {r["country"] for r in table} == {"DE", "FR"}


def test_an_empty_dimension_list_discovers_string_dimensions_and_compaction_keeps_them(
        stack, engine, spark, make_topic, datasource, deep_storage):
    """Druid's string discovery: every field but the timestamp and the metrics' inputs is a dimension."""
    topic = make_topic(2)
    first, second = make_sample_events(3_000, bad_every=10**9, seed=1), make_sample_events(2_000, bad_every=10**9,
                                                                                          seed=2)
    raw = spec_json(datasource, topic)
    raw["spec"]["dataSchema"]["dimensionsSpec"] = {"dimensions": []}
    spec = load_supervisor_spec(raw)
    settings = settings_for(stack, deep_storage)
    for sample in (first, second):  # two tasks: two generations of segments in each hour
        produce(stack.bootstrap_servers, topic, sample.records, 2)
        report = index_once(spark, engine, settings, spec)
        assert report.outcome.status == "ok" and report.dimensions == {"country": "string", "device": "string"}

    table = published_table(engine, datasource)
    assert table.schema.names == ["__time", "country", "device", "count", "value_sum", "value_min", "value_max",
                                  "price_sum"]
    assert_exact(table, merged(first, second))
    reports = compact(spark, engine, spec, deep_storage, storage_options=None)
    assert reports and all(r.outcome.ok for r in reports)
    assert_exact(published_table(engine, datasource), merged(first, second))


def test_transforms_and_a_filter_on_their_output_publish_what_druid_would(stack, engine, spark, make_topic,
                                                                           datasource, deep_storage):
    topic = make_topic(2)
    sample = make_sample_events(5_000, bad_every=10**9)
    produce(stack.bootstrap_servers, topic, sample.records, 2)
    raw = spec_json(datasource, topic)
    raw["spec"]["dataSchema"]["transformSpec"] = {
        "transforms": [{"type": "expression", "name": "country", "expression": "lower(country)"},
                       {"type": "expression", "name": "value", "expression": "value * 3"},
                       {"type": "expression", "name": "device", "expression": "concat(device, '/', country)"}],
        "filter": {"type": "like", "dimension": "device", "pattern": "%/DE"}}

    report = index_once(spark, engine, settings_for(stack, deep_storage), load_supervisor_spec(raw))

    events = [json.loads(r) for r in sample.records]
    kept = [e for e in events if e["country"] == "DE"]
    assert (report.records, report.thrown_away, report.unparseable) == (len(events), len(events) - len(kept), 0)
    rows = published_table(engine, datasource).to_pylist()
    assert {r["country"] for r in rows} == {"de"}
    assert {r["device"] for r in rows} == {f"{e['device']}/DE" for e in kept}
    assert sum(r["value_sum"] for r in rows) == sum(3 * e["value"] for e in kept)
    assert sum(r["count"] for r in rows) == len(kept)


def test_the_kafka_input_format_ingests_keys_headers_timestamps_and_the_topic(
        stack, engine, spark, make_topic, datasource, deep_storage):
    """Real records through the broker: the key, a header and the Kafka timestamp become columns."""
    topic = make_topic(1)
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers})
    base = 1_700_000_000_000
    for i in range(30):
        producer.produce(topic, key=f"user{i % 3}\tx".encode(), value=json.dumps({"value": i}).encode(),
                         headers=[("env", b"prod" if i % 2 else b"dev")], timestamp=base + i * 60_000)
        if i >= 28:  # the embedded broker reports the end as the last batch's base + 1: the last goes alone
            producer.flush(10)
    raw = spec_json(datasource, topic, inputFormat={"type": "kafka", "valueFormat": {"type": "json"},
                                                    "keyFormat": {"type": "tsv", "columns": ["user"]},
                                                    "headerFormat": {"type": "string"}})
    schema = raw["spec"]["dataSchema"]
    schema["timestampSpec"] = {"column": "kafka.timestamp", "format": "millis"}
    schema["dimensionsSpec"] = {"dimensions": ["kafka.key", "kafka.header.env", "kafka.topic"]}
    schema["metricsSpec"] = [{"type": "count", "name": "count"}, {"type": "longSum", "name": "v", "fieldName": "value"}]

    report = index_once(spark, engine, settings_for(stack, deep_storage), load_supervisor_spec(raw))

    assert report.outcome.status == "ok" and (report.records, report.unparseable) == (30, 0)
    rows = published_table(engine, datasource).to_pylist()
    assert {r["kafka.topic"] for r in rows} == {topic}
    totals: Counter[tuple[str, str]] = Counter()
    for r in rows:
        totals[(r["kafka.key"], r["kafka.header.env"])] += r["v"]
    expected: Counter[tuple[str, str]] = Counter()
    for i in range(30):
        expected[(f"user{i % 3}", "prod" if i % 2 else "dev")] += i
    assert totals == expected
    assert min(r["__time"] for r in rows).timestamp() * 1000 == base - base % 60_000  # MINUTE query granularity


def _produce_values(stack, topic: str, values: list[bytes], base_ms: int | None = None) -> None:
    """Produce ``values`` (with Kafka timestamps a second apart from ``base_ms``, if given)."""
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers})
    for i, value in enumerate(values):
        producer.produce(topic, value=value, **({} if base_ms is None else {"timestamp": base_ms + i * 1_000}))
        if i >= len(values) - 2:  # the embedded broker reports the end as the last batch's base + 1
            producer.flush(10)


def _city_value_spec(datasource: str, topic: str, input_format: dict[str, Any], timestamp_column: str
                     ) -> SupervisorSpec:
    """A spec of ``input_format`` values: a ``city`` dimension, ``count`` and ``v``, the sum of ``value``."""
    raw = spec_json(datasource, topic, inputFormat=input_format)
    schema = raw["spec"]["dataSchema"]
    schema["timestampSpec"] = {"column": timestamp_column, "format": "millis"}
    schema["dimensionsSpec"] = {"dimensions": ["city"]}
    schema["metricsSpec"] = [{"type": "count", "name": "count"}, {"type": "longSum", "name": "v", "fieldName": "value"}]
    return load_supervisor_spec(raw)


def test_csv_values_inside_the_kafka_format_are_ingested_through_the_broker(
        stack, engine, spark, make_topic, datasource, deep_storage):
    """CSV record values (quoted commas, empty values) beside the Kafka timestamp; malformed ones are counted."""
    topic = make_topic(1)
    values = [f'{i},"Bonn, DE",{"" if i % 5 == 0 else i}'.encode() for i in range(20)]
    _produce_values(stack, topic, [*values, b'1,"unclosed,3', b"2,Paris,2\n3,Paris,3"], base_ms=1_700_000_000_000)
    spec = _city_value_spec(datasource, topic, {"type": "kafka", "valueFormat": {
        "type": "csv", "columns": ["n", "city", "value"]}}, "kafka.timestamp")

    report = index_once(spark, engine, settings_for(stack, deep_storage), spec)

    assert report.outcome.status == "ok" and (report.records, report.unparseable) == (22, 2)
    rows = published_table(engine, datasource).to_pylist()
    assert {r["city"] for r in rows} == {"Bonn, DE"}
    assert sum(r["count"] for r in rows) == 20 and sum(r["v"] for r in rows) == sum(
        i for i in range(20) if i % 5)


def test_avro_values_are_ingested_through_the_broker(stack, engine, spark, make_topic, datasource, deep_storage):
    """Avro datums of an inline schema (a union, a nested record); one that does not decode is counted."""
    import io

    import fastavro

    avro_schema = {"type": "record", "name": "E", "fields": [
        {"name": "ts", "type": "long"}, {"name": "city", "type": ["null", "string"]},
        {"name": "stats", "type": {"type": "record", "name": "S", "fields": [{"name": "value", "type": "long"}]}}]}
    parsed_schema = fastavro.parse_schema(avro_schema)
    values = []
    for i in range(20):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed_schema, {"ts": 1_700_000_000_000 + i * 1_000,
                                                        "city": None if i % 4 else "Bonn", "stats": {"value": i}})
        values.append(out.getvalue())
    topic = make_topic(1)
    _produce_values(stack, topic, [*values, b"\x02"])
    spec = _city_value_spec(datasource, topic, {
        "type": "avro_stream", "avroBytesDecoder": {"type": "schema_inline", "schema": avro_schema},
        "flattenSpec": {"fields": [{"type": "path", "name": "value", "expr": "$.stats.value"}]}}, "ts")

    report = index_once(spark, engine, settings_for(stack, deep_storage), spec)

    assert report.outcome.status == "ok" and (report.records, report.unparseable) == (21, 1)
    totals: Counter[str | None] = Counter()
    for r in published_table(engine, datasource).to_pylist():
        totals[r["city"]] += r["v"]
    assert totals == {"Bonn": sum(i for i in range(20) if i % 4 == 0), None: sum(i for i in range(20) if i % 4)}


def test_a_topic_re_created_while_a_task_reads_it_publishes_nothing(stack, engine, spark, make_topic, datasource,
                                                                    deep_storage):
    """The task's range was planned against the old topic; what it read may be the new one's: nothing is published."""
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = make_topic(1)
    produce(stack.bootstrap_servers, topic, make_sample_events(5, bad_every=0).records, 1)
    request = next_task_request(engine, settings_for(stack, deep_storage), events_spec(datasource, topic))
    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})

    def re_create(_request: IndexTaskRequest) -> None:
        for future in admin.delete_topics([topic]).values():
            future.result(timeout=10)
        for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
            future.result(timeout=10)

    report = run_index_task(spark, engine, request, before_publish=re_create)
    assert report.outcome.status == "fatal" and "re-created" in report.outcome.message
    assert used_segments(engine, datasource) == []
    stored = committed_offsets(engine, datasource)
    assert stored is not None and dict(stored.offsets) == {0: 0}
