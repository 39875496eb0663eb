"""Every datasource is an Iceberg table that other engines read exactly: pyiceberg through its own
catalog client and file IO, and polars, after publishes, compaction, a spec update and a drop; a
reader racing live publishes and compactions sees, in every snapshot, exactly the records of the
offsets that snapshot's summary names; cleanup keeps what live snapshots reference.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl
import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog

from overlord.coordinator.auto_compaction import CompactionConfig
from overlord.dev.sample_data import make_sample_events, produce
from overlord.supervisor.task_ranges import index_once
from segment_store import DeepStorage, committed_offsets, visible_segments
from segment_store.open_tables import NAMESPACE, OFFSETS_KEY, TOPIC_KEY, OpenTables, _time_transform
from segment_store.records import SegmentRecord
from specs import load_supervisor_spec
from tests.exactness import Expected, compare, read_back, rows_by_key
from tests.helpers import (
    ON_EVERY_DEEP_STORAGE,
    assert_exact,
    committed_total,
    file_exists,
    published_table,
    settings_for,
    spec_json,
    wait_until,
)
from tests.test_typed_discovery import encoded, typed_spec


def reader_catalog(overlord: Any) -> Any:
    """The catalog as another engine opens it: pyiceberg's own SQL catalog client and file IO."""
    properties = {"type": "sql", "uri": overlord.settings.database_url}
    if overlord.settings.deep_storage.startswith("s3://"):
        properties["s3.endpoint"] = os.environ["AWS_ENDPOINT_URL"]
    return load_catalog("overlord", **properties)


def rows(table: pa.Table) -> Counter[tuple[Any, ...]]:
    """The table's rows as a multiset, columns in name order (lists and structs as JSON text)."""
    names = sorted(table.column_names)
    return Counter(tuple(json.dumps(v, default=repr) if isinstance(v, list | dict) else v for v in
                         (row[n] for n in names)) for row in table.select(names).to_pylist())


def _produce_and_wait(stack: Any, overlord: Any, topic: str, datasource: str, records: list[bytes]) -> None:
    total = max(0, committed_total(overlord.engine, datasource)) + len(records)
    produce(stack.bootstrap_servers, topic, records, 2)
    wait_until(lambda: committed_total(overlord.engine, datasource) == total, "a publish")


@ON_EVERY_DEEP_STORAGE
def test_the_table_follows_publishes_compaction_a_spec_update_and_a_drop(stack, make_topic, datasource,
                                                                         make_overlord, coordinator_of):
    topic = make_topic(2)
    overlord = make_overlord(iceberg_snapshot_retention_s=3600, kill_replaced_after_s=0, kill_backup_window_s=0)
    coordinator = coordinator_of(overlord)
    overlord.submit(spec_json(datasource, topic))
    first = make_sample_events(3_000, bad_every=0, seed=81)
    for half in (first.records[:1_500], first.records[1_500:]):  # at least two publishes: each hour holds several
        _produce_and_wait(stack, overlord, topic, datasource, half)
    appended_segments = visible_segments(overlord.engine, datasource)
    catalog = reader_catalog(overlord)

    [appended] = coordinator.export_tables()

    table = catalog.load_table((NAMESPACE, datasource))
    head = table.current_snapshot()
    assert appended.operation == "append" and head.snapshot_id == appended.snapshot_id
    assert json.loads(head.summary[OFFSETS_KEY]) == committed_offsets(overlord.engine, datasource).offsets.to_json()
    assert head.summary[TOPIC_KEY] == topic
    assert [str(f.transform) for f in table.spec().fields] == ["hour"]  # the spec's segmentGranularity
    assert_exact(table.scan().to_arrow(), first)
    assert rows(pl.scan_iceberg(table).collect().to_arrow()) == rows(table.scan().to_arrow())
    assert coordinator.export_tables() == []  # nothing changed: no snapshot

    _, done = coordinator.compact(datasource)
    assert all(report.outcome.ok for report in done.result(180))
    [replaced] = coordinator.export_tables()

    table = catalog.load_table((NAMESPACE, datasource))
    compacted_segments = {s.path for s in visible_segments(overlord.engine, datasource)}
    assert len(appended_segments) >= 4 and len(compacted_segments) == 2  # one segment per hour
    assert replaced.operation == "overwrite" and replaced.removed == len(appended_segments) and replaced.added == 2
    assert {f.file.file_path.removeprefix("file://") for f in table.scan().plan_files()} == compacted_segments
    assert_exact(table.scan().to_arrow(), first)
    assert_exact(table.scan(snapshot_id=appended.snapshot_id).to_arrow(), first)  # the old snapshot still reads
    kept = coordinator.kill_unused()
    assert kept.unused_segments == ()  # the replaced files are the appended snapshot's: kept while it lives
    assert all(file_exists(f.file.file_path.removeprefix("file://")) for f in
               table.scan(snapshot_id=appended.snapshot_id).plan_files())

    spec = spec_json(datasource, topic)
    spec["spec"]["dataSchema"]["metricsSpec"].append({"type": "longSum", "name": "value_sum_2", "fieldName": "value"})
    overlord.submit(spec)
    second = make_sample_events(1_000, bad_every=0, seed=82)
    _produce_and_wait(stack, overlord, topic, datasource, second.records)
    [evolved] = coordinator.export_tables()

    table = catalog.load_table((NAMESPACE, datasource))
    assert evolved.operation == "append" and "value_sum_2" in table.schema().column_names
    scanned = table.scan().to_arrow()
    assert rows(scanned) == rows(published_table(overlord.engine, datasource))
    assert sum(v for v in scanned["value_sum_2"].to_pylist() if v is not None) == sum(second.value_by_country.values())

    first_hour = min((s.interval_start, s.interval_end) for s in visible_segments(overlord.engine, datasource))
    assert coordinator.mark(datasource, used=False, interval=first_hour)
    [dropped] = coordinator.export_tables()

    table = catalog.load_table((NAMESPACE, datasource))
    assert dropped.operation == "overwrite"
    assert rows(table.scan().to_arrow()) == rows(published_table(overlord.engine, datasource))
    assert all(row["__time"] >= first_hour[1] for row in table.scan().to_arrow().select(["__time"]).to_pylist())

    storage = DeepStorage(overlord.settings.deep_storage)
    expired = coordinator.table_export.open_tables.expire(datasource, datetime.now(UTC) + timedelta(hours=1))
    assert expired == 3  # every snapshot but the current one (the drop)
    deleted = coordinator.kill_unused()
    # the compaction's inputs of the hour still visible: no snapshot references them now (the dropped hour's
    # wait for the unused retention: their replacement is unused too)
    kept_hour_inputs = {s.id for s in appended_segments if (s.interval_start, s.interval_end) != first_hour}
    assert set(deleted.unused_segments) == kept_hour_inputs and len(kept_hour_inputs) >= 2
    table = catalog.load_table((NAMESPACE, datasource))
    assert rows(table.scan().to_arrow()) == rows(published_table(overlord.engine, datasource))
    metadata_files = storage.fs.find(f"{storage.root}/{datasource}/metadata")
    assert len(metadata_files) <= 2 + len(table.metadata.metadata_log) + 2 * len(table.snapshots()) + 4


@pytest.mark.timeout(300)
def test_a_reader_racing_publishes_and_compactions_sees_exactly_the_offsets_each_snapshot_names(
        stack, make_topic, datasource, make_overlord, coordinator_of):
    topic = make_topic(2)
    overlord = make_overlord(iceberg_period_s=1, compaction_period_s=2, iceberg_snapshot_retention_s=3600,
                             task_min_interval_s=0)
    coordinator = coordinator_of(overlord)
    coordinator.set_compaction_config(CompactionConfig.model_validate(
        {"dataSource": datasource, "skipOffsetFromLatest": "PT0S"}))
    overlord.submit(spec_json(datasource, topic))
    catalog = reader_catalog(overlord)
    seen: dict[int, tuple[str, dict[str, int], Any]] = {}
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                table = catalog.load_table((NAMESPACE, datasource))
            except Exception:  # not created yet
                time.sleep(0.2)
                continue
            head = table.current_snapshot()
            if head is not None and head.snapshot_id not in seen:
                scanned = table.scan(snapshot_id=head.snapshot_id).to_arrow()
                seen[head.snapshot_id] = (head.summary.operation.value, json.loads(head.summary[OFFSETS_KEY]),
                                          rows_by_key(scanned))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    produced = 0
    try:
        for round_no in range(12):
            sample = make_sample_events(300, bad_every=0, seed=90 + round_no)
            produce(stack.bootstrap_servers, topic, sample.records, 2)
            produced += len(sample.records)
            time.sleep(1.0)
        wait_until(lambda: committed_total(overlord.engine, datasource) == produced, "everything published")
        final = committed_offsets(overlord.engine, datasource).offsets.to_json()
        wait_until(lambda: any(o == final for _, o, _ in list(seen.values())), "a snapshot of the final offsets", 60)
    finally:
        stop.set()
        reader.join(60)

    table = catalog.load_table((NAMESPACE, datasource))
    operations = Counter(op for op, _, _ in seen.values())
    # how many snapshots 12 rounds make depends on the machine's load (CI saw 9): enough to race, of both kinds
    assert len(table.snapshots()) >= 5 and operations["overwrite"] >= 1 and operations["append"] >= 1, operations
    topic_records = {p: read_back(stack.bootstrap_servers, topic, p, 0, final[str(p)]) for p in (0, 1)}
    for snapshot_id, (operation, offsets, found) in seen.items():
        expected = Expected()
        for p, records in topic_records.items():
            expected.add(records[:offsets.get(str(p), 0)])
        assert compare(expected, found) == {"lost": 0, "duplicated": 0, "keys_wrong": 0}, (snapshot_id, operation)


def test_multi_value_sketch_and_first_last_columns_read_back_as_written(stack, engine, spark, make_topic, datasource,
                                                                         deep_storage):
    """Multi-value dimensions are ``list<string>``, sketches binary, first/last pairs structs: each value
    read through pyiceberg is the one in the segment file.
    """
    topic = make_topic(1)
    raw = {"type": "kafka", "spec": {
        "dataSchema": {
            "dataSource": datasource, "timestampSpec": {"column": "ts", "format": "millis"},
            "dimensionsSpec": {"dimensions": ["sensor", {"type": "string", "name": "tags", "multiValueHandling":
                                                         "SORTED_ARRAY"}]},
            "metricsSpec": [{"type": "count", "name": "count"},
                            {"type": "longLast", "name": "last_reading", "fieldName": "reading"},
                            {"type": "stringFirst", "name": "first_status", "fieldName": "status"},
                            {"type": "thetaSketch", "name": "users", "fieldName": "user", "size": 1024}],
            "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "MINUTE"}},
        "ioConfig": {"topic": topic, "inputFormat": {"type": "json"}, "useEarliestOffset": True}}}
    events = [{"ts": 1_790_000_000_000 + i * 7_000, "sensor": f"s{i % 3}", "tags": [f"t{i % 4}", f"t{i % 5}"],
               "reading": i, "status": f"ok{i % 2}", "user": f"u{i % 37}"} for i in range(600)]
    produce(stack.bootstrap_servers, topic, [json.dumps(e).encode() for e in events], 1)
    settings = settings_for(stack, deep_storage)
    assert index_once(spark, engine, settings, load_supervisor_spec(raw)).outcome.status == "ok"

    outcome = OpenTables(settings.database_url, DeepStorage(deep_storage)).export(engine, datasource)

    table = load_catalog("overlord", type="sql", uri=settings.database_url).load_table((NAMESPACE, datasource))
    types = {field.name: str(field.field_type) for field in table.schema().fields}
    assert types["tags"] == "list<string>" and types["users"] == "binary"
    assert types["last_reading"].startswith("struct<") and outcome.operation == "append"
    assert rows(table.scan().to_arrow()) == rows(published_table(engine, datasource))


@pytest.mark.unit
@pytest.mark.parametrize(("start", "end", "partitioning"), [
    ("2026-11-01T03:00", "2026-11-01T04:00", ["hour"]), ("2026-11-01T00:00", "2026-11-02T00:00", ["day"]),
    ("2026-02-01T00:00", "2026-03-01T00:00", ["month"]), ("2026-01-01T00:00", "2027-01-01T00:00", ["year"]),
    ("2026-11-01T03:15", "2026-11-01T03:30", []),  # PT15M: finer than any Iceberg transform
    ("2026-11-02T00:00", "2026-11-09T00:00", [])])  # a week: Iceberg has no week transform
def test_a_table_is_partitioned_by_the_transform_its_intervals_are_one_period_of(start, end, partitioning):
    start_at, end_at = (datetime.fromisoformat(f"{t}+00:00") for t in (start, end))
    interval = SegmentRecord("s", "ds", start_at, end_at, 1, 0, "p", 1, 1, True, datetime.now(UTC), {})
    transform = _time_transform([interval])
    assert ([] if transform is None else [str(transform)]) == partitioning


def test_a_type_iceberg_cannot_widen_stops_only_that_export_and_is_logged_once(stack, make_topic, datasource,
                                                                              make_overlord, coordinator_of, caplog):
    """Discovery widens a column from long to double; Iceberg cannot (only int to long, float to double):
    the table keeps its last snapshot, the error is logged once, not every run, and the timeline goes on.
    """
    topic = make_topic(2)
    overlord = make_overlord()
    coordinator = coordinator_of(overlord)
    overlord.submit(typed_spec(datasource, topic))
    _produce_and_wait(stack, overlord, topic, datasource, encoded([{"x": 1, "v": 1}, {"x": 2, "v": 2}]))
    [first] = coordinator.export_tables()
    segments = len(visible_segments(overlord.engine, datasource))  # 1, or 2 if a look saw one partition's record
    _produce_and_wait(stack, overlord, topic, datasource, encoded([{"x": 2.5, "v": 3}]))

    caplog.clear()
    assert coordinator.export_tables() == [] and coordinator.export_tables() == []

    assert [r.getMessage() for r in caplog.records if r.name == "overlord.coordinator.table_export"] == [
        f"iceberg export of {datasource} failed (logged again when the error changes)"]
    assert "long" in caplog.text and "double" in caplog.text
    table = reader_catalog(overlord).load_table((NAMESPACE, datasource))
    assert table.current_snapshot().snapshot_id == first.snapshot_id
    assert committed_total(overlord.engine, datasource) == 3
    assert len(visible_segments(overlord.engine, datasource)) == segments + 1


def test_a_table_dropped_by_another_engine_is_made_again_whole_and_readable(stack, make_topic, datasource,
                                                                            make_overlord, coordinator_of):
    """Another engine drops the table; the next export builds it again from every visible file, with the name
    mapping readers need (the files carry no field IDs), not from the files published since.
    """
    topic = make_topic(2)
    overlord = make_overlord()
    coordinator = coordinator_of(overlord)
    overlord.submit(spec_json(datasource, topic))
    first = make_sample_events(1_000, bad_every=0, seed=91)
    _produce_and_wait(stack, overlord, topic, datasource, first.records)
    assert len(coordinator.export_tables()) == 1
    catalog = reader_catalog(overlord)
    catalog.drop_table((NAMESPACE, datasource))

    second = make_sample_events(500, bad_every=0, seed=92)
    _produce_and_wait(stack, overlord, topic, datasource, second.records)
    [made] = coordinator.export_tables()

    table = catalog.load_table((NAMESPACE, datasource))
    assert table.metadata.name_mapping() is not None
    assert rows(table.scan().to_arrow()) == rows(published_table(overlord.engine, datasource))
