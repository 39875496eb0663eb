"""Compaction on real PostgreSQL, Spark and Parquet: the swap's truth table, equal query results
before and after on random data, and compaction racing real indexing runs that append; each test
on a local segment root and on S3 (moto).
"""

from __future__ import annotations

import json
import math
import random
import threading
import time
from collections import Counter
from datetime import timedelta
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

import indexing_task.compaction_job as compaction_module
from indexing_task.compaction_job import CompactionError, compact
from indexing_task.task_errors import TaskStopped
from overlord.cli.main import _parser
from overlord.dev.sample_data import make_sample_events, produce
from overlord.query.engine import execute_sql
from overlord.supervisor.metadata_store import MetadataStore
from overlord.supervisor.task_ranges import index_once
from segment_store import CompactionSwap, swap_compacted, visible_segments
from segment_store.schema import segments as segment_status
from specs import SpecError, load_supervisor_spec
from tests.helpers import (
    ON_EVERY_DEEP_STORAGE,
    assert_exact,
    events_spec,
    merged,
    overlord_cli,
    published_table,
    settings_for,
)
from tests.test_timeline import (
    HOUR,
    SCHEMA,
    T0,
    fake_compact,
    publish_random,
    publish_segments,
    random_rows,
    write_segment,
)

pytestmark = ON_EVERY_DEEP_STORAGE


def swap(engine, datasource, read, new, job="job"):
    return swap_compacted(engine, CompactionSwap(datasource, T0, T0 + HOUR, read[0].version,
                                                 frozenset(s.id for s in read), tuple(new), job))


# --- the swap transaction ---------------------------------------------------------------------

def test_swap_replaces_what_was_read_and_carries_over_later_appends(engine, datasource, deep_storage):
    rng = random.Random(1)
    publish_random(engine, deep_storage, datasource, rng, T0, 10)
    publish_random(engine, deep_storage, datasource, rng, T0, 10)
    read = visible_segments(engine, datasource)
    publish_random(engine, deep_storage, datasource, rng, T0, 10)  # appended while "compacting"
    appended = [s for s in visible_segments(engine, datasource) if s.id not in {r.id for r in read}][0]
    new = write_segment(deep_storage, datasource, T0, pa.concat_tables(pq.read_table(s.path) for s in read))

    outcome = swap(engine, datasource, read, [new])

    assert outcome.ok and outcome.version == 2, outcome.message
    assert outcome.carried_over == (appended.id,) and set(outcome.replaced) == {r.id for r in read}
    shown = visible_segments(engine, datasource)
    assert [(s.id, s.version, s.partition_num) for s in shown] == [(new.id, 2, 0), (appended.id, 2, 1)]
    assert shown[1].path == appended.path  # metadata only: the file stays
    with engine.connect() as conn:
        st = segment_status.c
        stamped = conn.execute(sa.select(st.used, st.used_status_updated_at).where(
            st.id.in_([r.id for r in read]))).all()
    assert all(not used and when is not None for used, when in stamped)


def test_swap_is_retryable_when_another_compaction_swapped_first(engine, datasource, deep_storage):
    rng = random.Random(2)
    for _ in range(2):
        publish_random(engine, deep_storage, datasource, rng, T0, 10)
    read = visible_segments(engine, datasource)
    new = [write_segment(deep_storage, datasource, T0, random_rows(rng, 5, T0, T0 + HOUR)) for _ in range(2)]
    first = swap(engine, datasource, read, new[:1])
    second = swap(engine, datasource, read, new[1:])

    assert first.ok
    assert second.status == "retryable"
    assert "expected version 1, found 2" in second.message


def test_swap_is_retryable_when_a_segment_read_is_no_longer_used(engine, datasource, deep_storage):
    rng = random.Random(3)
    for _ in range(2):
        publish_random(engine, deep_storage, datasource, rng, T0, 10)
    read = visible_segments(engine, datasource)
    with engine.begin() as conn:
        conn.execute(segment_status.update().where(segment_status.c.id == read[0].id).values(used=False))

    outcome = swap(engine, datasource, read, [])

    assert outcome.status == "retryable" and "found 1 no longer used" in outcome.message
    assert {s.id for s in visible_segments(engine, datasource)} == {read[1].id}  # nothing changed


def test_swap_of_an_existing_segment_id_is_fatal_and_changes_nothing(engine, datasource, deep_storage):
    rng = random.Random(4)
    for _ in range(2):
        publish_random(engine, deep_storage, datasource, rng, T0, 10)
    read = visible_segments(engine, datasource)
    clash = write_segment(deep_storage, datasource, T0, random_rows(rng, 5, T0, T0 + HOUR))
    object.__setattr__(clash, "id", read[0].id)

    outcome = swap(engine, datasource, read, [clash])

    assert outcome.status == "fatal" and "already exists" in outcome.message
    assert visible_segments(engine, datasource) == read


def test_swaps_racing_publishes_never_lose_or_double_count(engine, datasource, deep_storage):
    """Metadata-level race: 40 publishes against back-to-back read-then-swap compactions."""
    published = [publish_random(engine, deep_storage, datasource, random.Random(5), T0, 20)]
    done = threading.Event()
    outcomes: list[str] = []

    def appender() -> None:
        rng = random.Random(6)
        for _ in range(40):
            published.append(publish_random(engine, deep_storage, datasource, rng, T0, 20))
        done.set()

    thread = threading.Thread(target=appender)
    thread.start()
    while not done.is_set() or len(outcomes) < 3:
        outcomes.append(fake_compact(engine, deep_storage, datasource, T0).status)
    thread.join()

    shown, expected = published_table(engine, datasource), pa.concat_tables(published)
    assert "ok" in outcomes and set(outcomes) <= {"ok", "retryable"}, outcomes
    for column in ("count", "value_sum"):
        assert pc.sum(shown[column]).as_py() == pc.sum(expected[column]).as_py()
    assert shown.num_rows == expected.num_rows  # fake compaction concatenates: every row exactly once


# --- the Spark job ----------------------------------------------------------------------------

def _queries(spark, engine, ds: str) -> dict[str, list[list[Any]]]:
    q = f"`{ds}`"
    return {name: execute_sql(spark, engine, sql.format(q=q)).rows() for name, sql in {
        "by_country": "SELECT country, device, sum(`count`), sum(value_sum), min(value_min), max(value_max), "
                      "round(sum(price_sum), 6) FROM {q} GROUP BY 1, 2 ORDER BY 1, 2",
        "series": "SELECT date_trunc('HOUR', __time) AS t, sum(`count`), sum(value_sum) FROM {q} GROUP BY 1 ORDER BY 1",
        "minute": "SELECT __time, country, sum(`count`) FROM {q} WHERE __time >= TIMESTAMP '2026-11-01 01:30:00' "
                  "GROUP BY 1, 2 ORDER BY 1, 2",
    }.items()}


def test_compaction_keeps_query_results_identical_on_random_data(spark, engine, datasource, deep_storage):
    rng = random.Random(7)
    for hour in range(3):  # overlapping keys across segments, so rows really merge
        for _ in range(5):
            publish_random(engine, deep_storage, datasource, rng, T0 + hour * HOUR, 120, end=T0 + (hour + 1) * HOUR)
    publish_random(engine, deep_storage, datasource, rng, T0 + 5 * HOUR, 50)  # one segment: left alone
    before = _queries(spark, engine, datasource)
    rows_before = published_table(engine, datasource).num_rows

    reports = compact(spark, engine, events_spec(datasource), deep_storage, max_rows_per_segment=250)

    assert [r.outcome.status for r in reports] == ["ok"] * 3
    assert [r.interval_start for r in reports] == [T0, T0 + HOUR, T0 + 2 * HOUR]
    assert _queries(spark, engine, datasource) == before
    after = published_table(engine, datasource)
    assert after.schema == SCHEMA and after.num_rows < rows_before
    for report in reports:
        assert report.input_segments == 5 and report.input_rows == 600
        assert len(report.output_segments) == math.ceil(report.output_rows / 250)
        assert all(s.num_rows <= 250 for s in report.output_segments)
    keys = Counter(zip(after["__time"].to_pylist(), after["country"].to_pylist(), after["device"].to_pylist(),
                       strict=True))
    assert max(keys.values()) == 1  # re-rolled up: one row per (minute, country, device)
    assert compact(spark, engine, events_spec(datasource), deep_storage, max_rows_per_segment=250,
                   min_segments=4) == []  # nothing left with that many segments


def _files(deep_storage: str) -> list[str]:
    fs, root = fsspec.core.url_to_fs(deep_storage, skip_instance_cache=True)
    return sorted(fs.find(root))


def test_a_stopped_compaction_swaps_nothing(spark, engine, datasource, deep_storage):
    """A stop (shutdown, a step-down) once only cancelled a running Spark job: a compaction on a resident
    runner, or one stopped before its job started, still swapped; one stopped while it waited ran its whole job.
    """
    rng = random.Random(10)
    for _ in range(3):
        publish_random(engine, deep_storage, datasource, rng, T0, 40)
    before = [s.id for s in visible_segments(engine, datasource)]
    files = _files(deep_storage)
    stop = threading.Event()
    stop.set()
    with pytest.raises(TaskStopped, match="nothing was swapped"):
        compact(spark, engine, events_spec(datasource), deep_storage, stop=stop)
    assert [s.id for s in visible_segments(engine, datasource)] == before
    assert _files(deep_storage) == files  # no job ran: nothing was even written


def test_a_compaction_stopped_between_swaps_swaps_no_more_and_says_what_it_swapped(
        spark, engine, datasource, deep_storage, monkeypatch):
    rng = random.Random(11)
    for hour in range(2):
        for _ in range(2):
            publish_random(engine, deep_storage, datasource, rng, T0 + hour * HOUR, 40)
    stop, swapped = threading.Event(), []

    def swap_then_stop(*args: Any) -> Any:
        swapped.append(real_swap(*args))
        stop.set()  # the stop lands after the first interval's swap
        return swapped[-1]

    real_swap = compaction_module.swap_compacted
    monkeypatch.setattr(compaction_module, "swap_compacted", swap_then_stop)
    with pytest.raises(TaskStopped, match="1 interval was swapped before the stop"):
        compact(spark, engine, events_spec(datasource), deep_storage, stop=stop)
    assert len(swapped) == 1 and swapped[0].ok
    per_hour = Counter(s.interval_start for s in visible_segments(engine, datasource))
    assert sorted(per_hour.values()) == [1, 2]  # one hour compacted to one segment, the other untouched


def test_compaction_without_rollup_keeps_every_row(spark, engine, datasource, deep_storage):
    rng = random.Random(8)
    tables = [publish_random(engine, deep_storage, datasource, rng, T0, 40) for _ in range(3)]

    [report] = compact(spark, engine, events_spec(datasource, rollup=False), deep_storage)

    assert report.outcome is not None and report.outcome.ok
    after = published_table(engine, datasource)
    assert after.num_rows == report.output_rows == 120 and len(report.output_segments) == 1
    assert sorted(after.to_pylist(), key=str) == sorted(pa.concat_tables(tables).to_pylist(), key=str)


def test_compaction_refuses_files_with_columns_the_spec_dropped(spark, engine, datasource, deep_storage):
    """Merging without the column would lose its values: queries would change."""
    rng = random.Random(9)
    for _ in range(2):
        table = random_rows(rng, 10, T0, T0 + HOUR)
        table = table.append_column("legacy", pa.array(["x"] * table.num_rows))
        publish_segments(engine, datasource, write_segment(deep_storage, datasource, T0, table))

    with pytest.raises(CompactionError, match=r"columns \['legacy'\] are not in the spec"):
        compact(spark, engine, events_spec(datasource), deep_storage)
    assert all(s.version == 1 for s in visible_segments(engine, datasource))


def test_compaction_fills_columns_older_files_lack(spark, engine, datasource, deep_storage):
    """A metric added by a later spec: rows written before it hold null in it (a sum of no values is null,
    as at ingestion) unless they merge with newer rows, and keep their other values.
    """
    rng = random.Random(10)
    older = random_rows(rng, 10, T0, T0 + HOUR).drop_columns(["price_sum"])
    newer = random_rows(rng, 10, T0, T0 + HOUR)
    for table in (older, newer):
        publish_segments(engine, datasource, write_segment(deep_storage, datasource, T0, table))

    (report,) = compact(spark, engine, events_spec(datasource), deep_storage)
    assert report.outcome.ok
    compacted = pa.concat_tables(pq.read_table(s.path) for s in visible_segments(engine, datasource))
    assert sum(compacted.column("count").to_pylist()) == sum(older.column("count").to_pylist()) + sum(
        newer.column("count").to_pylist())
    price_sums = compacted.column("price_sum").to_pylist()
    assert sum(p for p in price_sums if p is not None) == pytest.approx(sum(newer.column("price_sum").to_pylist()))
    assert price_sums.count(None) > 0  # rows from the older file only: null, not 0


def test_compaction_racing_repeated_indexing_is_exact(stack, spark, engine, make_topic, datasource, deep_storage):
    """Indexing runs append to the same two hours while compaction swaps them, again and again."""
    topic = make_topic(2)
    settings = settings_for(stack, deep_storage)
    spec = events_spec(datasource, topic)
    samples = [make_sample_events(1_500, bad_every=0, seed=s, start=T0) for s in range(6)]
    first_indexed, indexing_done = threading.Event(), threading.Event()
    statuses: list[str] = []
    carried: list[int] = []
    errors: list[BaseException] = []

    def indexing() -> None:
        try:
            for n, sample in enumerate(samples):
                produce(stack.bootstrap_servers, topic, sample.records, 2)
                report = index_once(spark, engine, settings, spec)
                statuses.append(report.outcome.status)
                if n == 1:
                    first_indexed.set()
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        finally:
            first_indexed.set()
            indexing_done.set()

    def compacting() -> None:
        try:
            first_indexed.wait(120)
            while not indexing_done.is_set():
                for r in compact(spark, engine, spec, deep_storage):
                    statuses.append("compaction " + r.outcome.status)
                    carried.append(len(r.outcome.carried_over))
                time.sleep(0.05)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=indexing), threading.Thread(target=compacting)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads)
    final = compact(spark, engine, spec, deep_storage)

    assert not errors, errors
    assert statuses.count("ok") == len(samples), statuses
    assert statuses.count("compaction ok") >= 1 and all(s.endswith("ok") for s in statuses), statuses
    assert all(r.outcome.ok for r in final)
    segments = visible_segments(engine, datasource)
    assert len({s.id for s in segments}) == len(segments) and len(segments) == 2  # one per hour after the last run
    assert_exact(published_table(engine, datasource), merged(*samples))
    print(f"compactions: {statuses.count('compaction ok')}, appended segments carried over: {sum(carried)}")


def test_compact_command_line(stack, spark, engine, datasource, deep_storage, tmp_path, monkeypatch, capsys):
    """``overlord compact`` in-process (the session's Spark is reused); a wrong datasource as a user would."""
    rng = random.Random(10)
    deep = deep_storage
    for _ in range(3):
        publish_random(engine, deep, datasource, rng, T0, 30)
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(events_spec(datasource).to_druid_json()))
    env = {**stack.as_env(), "OVERLORD_DEEP_STORAGE": deep}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    args = _parser().parse_args(["compact", datasource, "--spec", str(spec_file), "--interval",
                                 f"{T0.isoformat()}/{(T0 + timedelta(days=1)).isoformat()}"])

    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "3 segments (90 rows) -> 1 segment" in out and "version 2" in out and out.rstrip().endswith("OK")
    assert [s.version for s in visible_segments(engine, datasource)] == [2]
    wrong = overlord_cli("compact", "other-datasource", "--spec", str(spec_file), env=env)
    assert wrong.returncode == 2 and "other-datasource" in wrong.stderr


def test_compact_command_line_refuses_a_spec_that_disagrees_with_the_stored_history(
        stack, spark, engine, datasource, deep_storage, tmp_path, monkeypatch, capsys):
    """Rows are re-aggregated only as they were aggregated: a metric redefined in the file is refused."""
    rng = random.Random(11)
    for _ in range(2):
        publish_random(engine, deep_storage, datasource, rng, T0, 30)
    stored = events_spec(datasource).to_druid_json()
    store = MetadataStore(engine)
    store.append_spec(datasource, stored)
    wrong = json.loads(json.dumps(stored))
    [value_sum] = [m for m in wrong["spec"]["dataSchema"]["metricsSpec"] if m["name"] == "value_sum"]
    value_sum["type"] = "longMax"
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(wrong))
    for key, value in {**stack.as_env(), "OVERLORD_DEEP_STORAGE": deep_storage}.items():
        monkeypatch.setenv(key, value)
    before = sorted((s.id, s.version) for s in visible_segments(engine, datasource))

    args = _parser().parse_args(["compact", datasource, "--spec", str(spec_file)])
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert "spec.dataSchema.metricsSpec[1].type" in err and "expected longSum, found longMax" in err, err
    assert sorted((s.id, s.version) for s in visible_segments(engine, datasource)) == before  # nothing compacted


def test_a_spec_redefining_a_metric_of_indexed_segments_is_refused_without_a_stored_spec(
        stack, spark, engine, make_topic, datasource, deep_storage, tmp_path, monkeypatch, capsys):
    """``overlord index`` stores no supervisor spec: the segments' record of their metrics guards compaction."""
    topic = make_topic(1)
    spec = events_spec(datasource, topic).to_druid_json()
    wrong = json.loads(json.dumps(spec))
    [value_sum] = [m for m in wrong["spec"]["dataSchema"]["metricsSpec"] if m["name"] == "value_sum"]
    value_sum["type"] = "longMax"
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    (tmp_path / "wrong.json").write_text(json.dumps(wrong))
    for key, value in {**stack.as_env(), "OVERLORD_DEEP_STORAGE": deep_storage}.items():
        monkeypatch.setenv(key, value)
    for value in (5, 7):  # two tasks: two segments of one row each to merge
        event = {"ts": "2024-05-01T10:00:00Z", "country": "NL", "device": "d", "value": value, "price": 1.0}
        produce(stack.bootstrap_servers, topic, [json.dumps(event).encode()], 1)
        assert cli("index", str(tmp_path / "spec.json")) == 0
    assert not MetadataStore(engine).datasource_history(datasource)

    def total() -> int:
        return int(execute_sql(spark, engine, f'SELECT SUM(value_sum) AS s FROM "{datasource}"').table[0][0].as_py())

    before = sorted((s.id, s.version) for s in visible_segments(engine, datasource))
    assert len(before) == 2 and total() == 12
    capsys.readouterr()
    assert cli("compact", datasource, "--spec", str(tmp_path / "wrong.json")) == 2
    err = capsys.readouterr().err
    assert "metric 'value_sum': expected longSum, found longMax" in err, err
    with pytest.raises(SpecError, match="metric 'value_sum': expected longSum, found longMax"):
        compact(spark, engine, load_supervisor_spec(wrong), deep_storage)  # the API's and the duty's path
    assert cli("index", str(tmp_path / "wrong.json")) == 2  # nor indexes more rows beside them
    assert sorted((s.id, s.version) for s in visible_segments(engine, datasource)) == before and total() == 12


def cli(*argv: str) -> int:
    """``overlord ARGV`` in-process (the session's Spark is reused); its exit code."""
    args = _parser().parse_args(argv)
    return int(args.func(args))
