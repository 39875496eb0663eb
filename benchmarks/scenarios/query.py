"""Query benchmark: latency of a group-by, a time-series and a one-hour query over many small
segments, before and after compaction, against DuckDB reading the same files; and compaction throughput.

Builds ``--rows`` rolled-up rows as ``--hours`` HOUR intervals x ``--tasks`` small segments
each (every fake task publishes one segment per hour, with consecutive fake offset ranges,
through the real publish transaction, recording each file's min/max ``__time`` as ingestion
does; no Kafka), then measures the queries ``--runs`` times each (after one warm-up run)
through the real query path (which serves small queries from DuckDB inside the overlord), the
same path on Spark only, and DuckDB over ``read_parquet`` of the same visible files; compacts
every interval with the real Spark job, checks the results did not change (and that all three
agree), and measures again.

    python -m benchmarks.scenarios.query --rows 10000000
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import sqlalchemy as sa

from benchmarks.results_file import parse_args, save_results
from benchmarks.suite import machine
from indexing_task.compaction_job import compact
from indexing_task.spark import get_spark
from overlord.config import Settings
from overlord.dev.stack import dev_stack
from overlord.query.druid_sql import translate
from overlord.query.engine import execute_sql
from overlord.query.formats import QueryResult
from overlord.query.local_engine import LocalEngine
from overlord.query.time_pruning import time_ranges
from segment_store import PublishRequest, SegmentDescriptor, publish, upgrade_schema, visible_segments
from segment_store.deep_storage import DeepStorage
from specs import load_supervisor_spec

DATASOURCE = "bench-query"
START = datetime(2026, 11, 1, tzinfo=UTC)
DIMS = {"country": 50, "device": 4, "os": 30}
"""Dimension -> cardinality; a segment draws its rows from a random 10-minute window of its hour."""
QUERIES = {
    "group_by": f'SELECT country, device, SUM("count") AS events, SUM(value_sum) AS value, MAX(value_max) AS top '
                f'FROM "{DATASOURCE}" GROUP BY country, device ORDER BY country, device',
    "time_series": f"SELECT date_trunc('HOUR', __time) AS t, SUM(\"count\") AS events, SUM(price_sum) AS price "
                   f'FROM "{DATASOURCE}" GROUP BY 1 ORDER BY 1',
    "one_hour": f'SELECT country, SUM("count") AS events, SUM(value_sum) AS value FROM "{DATASOURCE}" '
                "WHERE __time >= TIMESTAMP '2026-11-01 05:00:00' AND __time < TIMESTAMP '2026-11-01 06:00:00' "
                "GROUP BY country ORDER BY country",
    # the same, over a subquery: proves nothing about __time, so our path reads every file (no pruning)
    "one_hour_unpruned": f'SELECT country, SUM("count") AS events, SUM(value_sum) AS value '
                         f'FROM (SELECT * FROM "{DATASOURCE}") WHERE __time >= TIMESTAMP \'2026-11-01 05:00:00\' '
                         "AND __time < TIMESTAMP '2026-11-01 06:00:00' GROUP BY country ORDER BY country",
}
"""Run unchanged by both engines (DuckDB reads ``"bench-query"`` as a view over the files)."""


def spec(datasource: str = DATASOURCE) -> Any:
    return load_supervisor_spec({"type": "kafka", "spec": {
        "dataSchema": {
            "dataSource": datasource, "timestampSpec": {"column": "ts", "format": "millis"},
            "dimensionsSpec": {"dimensions": list(DIMS)},
            "metricsSpec": [{"type": "count", "name": "count"},
                            {"type": "longSum", "name": "value_sum", "fieldName": "value"},
                            {"type": "longMin", "name": "value_min", "fieldName": "value"},
                            {"type": "longMax", "name": "value_max", "fieldName": "value"},
                            {"type": "doubleSum", "name": "price_sum", "fieldName": "price"}],
            "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "MINUTE"}},
        "ioConfig": {"topic": "bench-query", "useEarliestOffset": True}}})


def segment_rows(rng: np.random.Generator, n: int, hour: datetime) -> pa.Table:
    """``n`` distinct rolled-up rows (minute, dims) of one segment, sorted like ingestion writes them."""
    combos = int(np.prod(list(DIMS.values())))
    window = int(rng.integers(0, 51))
    keys = np.sort(rng.choice(10 * combos, size=n, replace=False))
    minute, rest = np.divmod(keys, combos)
    columns: dict[str, Any] = {"__time": pa.array(
        int(hour.timestamp() * 1000) + (window + minute) * 60_000, pa.timestamp("ms", tz="UTC"))}
    for name, card in reversed(DIMS.items()):
        rest, value = np.divmod(rest, card)
        columns[name] = pa.array(np.char.add(name[0], value.astype(str)).astype(object))
    columns = {"__time": columns["__time"], **{d: columns[d] for d in DIMS}}
    count = rng.integers(1, 20, n)
    low = rng.integers(-50, 500, n)
    high = low + rng.integers(0, 500, n)
    columns.update({"count": count, "value_sum": count * (low + high) // 2, "value_min": low, "value_max": high,
                    "price_sum": np.round(rng.random(n) * 100 * count, 2)})
    return pa.table(columns)


def build(engine: sa.Engine, storage: DeepStorage, rows: int, hours: int, tasks: int,
          datasource: str = DATASOURCE) -> int:
    """Write and publish ``tasks`` x ``hours`` segments; return the number of rows written (the same rows
    every time).
    """
    rng = np.random.default_rng(1)
    per_segment = rows // (hours * tasks)
    written = 0
    for task in range(tasks):
        segments = []
        for h in range(hours):
            start = START + timedelta(hours=h)
            table = segment_rows(rng, per_segment, start)
            path = storage.path_for(datasource, start, start + timedelta(hours=1), f"bench-task-{task:04d}", 0)
            written_file = storage.write_table(path, table)
            times = table["__time"]
            segments.append(SegmentDescriptor(
                f"{datasource}_{task}_{h}", datasource, start, start + timedelta(hours=1), path,
                written_file.size_bytes, table.num_rows,
                {"min_time": pc.min(times).as_py().isoformat(), "max_time": pc.max(times).as_py().isoformat(),
                 **({"checksum": written_file.checksum} if written_file.checksum else {})}))
            written += table.num_rows
        outcome = publish(engine, PublishRequest(datasource, "bench-query", f"bench-task-{task}", {0: task},
                                                 {0: task + 1}, {0: 0}, tuple(segments)))
        if not outcome.ok:
            raise RuntimeError(outcome.message)
    return written


def duckdb_over_visible_files(engine: sa.Engine) -> duckdb.DuckDBPyConnection:
    """DuckDB with a view named like the datasource over ``read_parquet`` of its visible files."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    paths = [s.path for s in visible_segments(engine, DATASOURCE)]
    con.execute(f'CREATE VIEW "{DATASOURCE}" AS SELECT * FROM read_parquet({paths!r})')
    return con


def timed(run: Any, runs: int) -> tuple[Any, dict[str, Any]]:
    """The first run's result, and its time with the p50/p95 of ``runs`` more."""
    started = time.monotonic()
    result = run()
    first = time.monotonic() - started
    times = []
    for _ in range(runs):
        started = time.monotonic()
        run()
        times.append(time.monotonic() - started)
    times.sort()
    return result, {"first_run_s": round(first, 3), "p50_s": round(statistics.median(times), 3),
                    "p95_s": round(times[min(len(times) - 1, round(0.95 * (len(times) - 1)))], 3), "runs": runs}


def segments_read(engine: sa.Engine, sql: str) -> int:
    """How many visible segments our query path reads for ``sql`` (after time pruning)."""
    segments = visible_segments(engine, DATASOURCE)
    time_range = time_ranges(translate(sql).sql, {DATASOURCE: sql.count(f'"{DATASOURCE}"')}).get(DATASOURCE)
    return len(segments) if time_range is None else sum(time_range.reads(s) for s in segments)


def measure(spark: Any, engine: sa.Engine, local: LocalEngine,
            runs: int) -> tuple[dict[str, Any], dict[str, list[list[Any]]]]:
    """Each query through our path (DuckDB or Spark, as it routes), forced onto Spark, and DuckDB's own."""
    figures: dict[str, Any] = {}
    results: dict[str, list[list[Any]]] = {}
    con = duckdb_over_visible_files(engine)
    for name, sql in QUERIES.items():
        ours, ours_s = timed(lambda sql=sql: execute_sql(spark, engine, sql, local=local), runs)
        on_spark, spark_s = timed(lambda sql=sql: execute_sql(spark, engine, sql), runs)
        theirs, duck_s = timed(lambda sql=sql: QueryResult(con.sql(sql).to_arrow_table()), runs)
        results[name] = ours.rows()
        figures[name] = {"ours": ours_s, "ours_engine": ours.engine, "spark": spark_s, "duckdb": duck_s,
                         "ours_over_duckdb_p50": round(ours_s["p50_s"] / duck_s["p50_s"], 2),
                         "ours_over_duckdb_p95": round(ours_s["p95_s"] / duck_s["p95_s"], 2),
                         "spark_over_duckdb_p95": round(spark_s["p95_s"] / duck_s["p95_s"], 2),
                         "duckdb_result_identical": same({name: results[name]}, {name: theirs.rows()}),
                         "spark_result_identical": same({name: results[name]}, {name: on_spark.rows()}),
                         "segments_read": segments_read(engine, sql),
                         "segments_visible": len(visible_segments(engine, DATASOURCE))}
        f = figures[name]
        print(f"  {name}: ours ({ours.engine}) p50 {ours_s['p50_s']:.3f}s p95 {ours_s['p95_s']:.3f}s | "
              f"spark p50 {spark_s['p50_s']:.3f}s p95 {spark_s['p95_s']:.3f}s | duckdb p50 {duck_s['p50_s']:.3f}s "
              f"p95 {duck_s['p95_s']:.3f}s | ours/duckdb p95 {f['ours_over_duckdb_p95']} | same results "
              f"{f['duckdb_result_identical'] and f['spark_result_identical']} | "
              f"{f['segments_read']}/{f['segments_visible']} segments read", flush=True)
    con.close()
    return figures, results


def same(before: dict[str, list[list[Any]]], after: dict[str, list[list[Any]]]) -> bool:
    """Equal results; double sums may differ in the last bits (summation order), so compare those to 1e-9."""
    for name, rows in before.items():
        for a, b in zip(rows, after[name], strict=True):
            for x, y in zip(a, b, strict=True):
                if x != y and not (isinstance(x, float) and abs(x - y) <= 1e-9 * max(abs(x), 1.0)):
                    return False
    return all(len(before[n]) == len(after[n]) for n in before)


def run(rows: int, hours: int, tasks: int, runs: int) -> dict[str, Any]:
    results: dict[str, Any] = {
        "benchmark": "query", "started": datetime.now(UTC).isoformat(),
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
                    "load_avg_at_start": machine.load_average()},
        "spark_master": "local[*]", "queries": QUERIES,
        "ours": "execute_sql with the overlord's local engine (default OVERLORD_QUERY_LOCAL_MAX_BYTES); spark: "
                "the same path without it",
        "duckdb": {"version": duckdb.__version__, "reads": "read_parquet([visible segment paths]), a view per phase, "
                   "TimeZone UTC, default threads"}}
    with dev_stack() as stack:
        engine = sa.create_engine(stack.database_url)
        upgrade_schema(engine)
        storage = DeepStorage(stack.deep_storage)
        started = time.monotonic()
        written = build(engine, storage, rows, hours, tasks)
        segments = len(visible_segments(engine, DATASOURCE))
        print(f"built {written:,} rows in {segments:,} segments in {time.monotonic() - started:.1f}s", flush=True)
        results["data"] = {"rows": written, "segments": segments, "intervals": hours, "segments_per_interval": tasks}
        spark = get_spark("local[*]")
        local = LocalEngine(stack.deep_storage, Settings.model_fields["query_local_max_bytes"].default)
        print("before compaction:", flush=True)
        results["before"], before = measure(spark, engine, local, runs)

        started = time.monotonic()
        reports = compact(spark, engine, spec(), stack.deep_storage)
        seconds = time.monotonic() - started
        if not all(r.outcome is not None and r.outcome.ok for r in reports):
            raise RuntimeError(f"compaction failed: {[r.outcome for r in reports]}")
        rows_in, rows_out = sum(r.input_rows for r in reports), sum(r.output_rows for r in reports)
        results["compaction"] = {
            "seconds": round(seconds, 2), "rows_in": rows_in, "rows_out": rows_out,
            "rows_per_s": round(rows_in / seconds), "segments_in": sum(r.input_segments for r in reports),
            "segments_out": sum(len(r.output_segments) for r in reports)}
        c = results["compaction"]
        print(f"compaction: {rows_in:,} rows in {c['segments_in']:,} segments -> {rows_out:,} rows in "
              f"{c['segments_out']} segments in {seconds:.1f}s ({c['rows_per_s']:,} rows/s)", flush=True)
        print("after compaction:", flush=True)
        results["after"], after = measure(spark, engine, local, runs)
        results["results_identical"] = same(before, after)
        results["duckdb_results_identical"] = all(
            results[phase][name]["duckdb_result_identical"] and results[phase][name]["spark_result_identical"]
            for phase in ("before", "after") for name in QUERIES)
        print(f"results identical before and after: {results['results_identical']}; "
              f"DuckDB's and Spark's identical to ours: {results['duckdb_results_identical']}")
        spark.stop()
        engine.dispose()
    results["machine"]["load_avg_at_end"] = machine.load_average()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--tasks", type=int, default=100, help="segments per hour before compaction")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("query.json"),
                        help="a name under benchmarks/results, or a path")
    args = parse_args(parser, {"rows": 2_000, "hours": 2, "tasks": 3, "runs": 1})
    save_results(run(args.rows, args.hours, args.tasks, args.runs), args.out, args.smoke)


if __name__ == "__main__":
    main()
