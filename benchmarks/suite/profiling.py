"""Profile the hot path: what one Spark worker does (``index_split``), under cProfile, in this process.

Each partition of a freshly produced topic is one split, processed one after another in
the driver (no Spark), so the profile is the worker's code alone: read, parse + roll up
(DuckDB), write Parquet. Native time shows under the Python call that entered it
(``Consumer.consume``, ``DuckDBPyConnection.execute``); ``py-spy record --native`` on a
running suite breaks it down further.
"""

from __future__ import annotations

import cProfile
import pstats
import time
import uuid
from typing import Any

from benchmarks.suite.runs import Bench, new_topic, spec_for
from benchmarks.suite.shapes import Shape
from benchmarks.suite.topics import delete_topics
from indexing_task.offset_ranges import Split
from indexing_task.reader import consumer_config
from indexing_task.rollup_schema import RollupSchema
from indexing_task.spark_worker import TaskPayload, index_split

__all__ = ["profile_shapes"]

_ROLLUP_MODULES = ("rollup_schema.py", "arrow_queries.py", "partial_rows.py", "field_discovery.py", "parse_sql.py",
                   "aggregate_sql.py", "field_sql.py", "metric_sql.py", "multi_value_sql.py", "values_sql.py")
"""The modules cut out of ``rollup.py``: their Python time is the rollup's glue, as when they were one file."""

CATEGORIES = (
    ("Kafka consume (librdkafka fetch + message objects)", ("method 'consume'",)),
    ("message values to lists (Python)", ("<listcomp>", "method 'value'", "method 'extend'", "method 'error'")),
    ("DuckDB: parse, roll up, merge, sort", ("duckdb", "_seam.py", "_relation.py")),
    ("Parquet write (zstd)", ("write_table", "ParquetWriter")),
    ("rollup.py / worker.py (Python + Arrow glue)", ("rollup.py", "worker.py", "pyarrow", *_ROLLUP_MODULES)),
)


def _payload(bench: Bench, shape: Shape, topic: str, ends: dict[int, int]) -> TaskPayload:
    spec = spec_for(f"profile_{uuid.uuid4().hex[:8]}", topic, shape.low, shape.high)
    return TaskPayload(
        task_id=f"profile-{uuid.uuid4().hex[:8]}", datasource=spec.datasource, topic=topic,
        consumer_config=consumer_config({"bootstrap.servers": bench.bootstrap}, "bench-profile"),
        rollup_schema=RollupSchema.from_spec(spec.spec.data_schema),
        deep_storage=str(bench.workdir / "profile"), max_rows_in_memory=1_000_000,
        splits=tuple(Split(i, p, 0, end) for i, (p, end) in enumerate(sorted(ends.items()))))


def _category(function: str) -> str:
    for name, needles in CATEGORIES:
        if any(n in function for n in needles):
            return name
    return "other"


def profile_shape(bench: Bench, shape: Shape, events: int, top: int = 15) -> dict[str, Any]:
    made = new_topic(bench, shape, events)
    payload = _payload(bench, shape, made["topic"], made["ends"])
    profiler = cProfile.Profile()
    started = time.monotonic()
    profiler.enable()
    records = sum(index_split(payload, split).records for split in payload.splits)
    profiler.disable()
    elapsed = time.monotonic() - started
    delete_topics(bench.bootstrap, [made["topic"]])
    if records != events:
        raise RuntimeError(f"profile of {shape.name}: read {records} of {events} records")
    stats = pstats.Stats(profiler)
    entries = []
    by_category: dict[str, float] = {}
    for (file, line, name), (_cc, calls, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        function = f"{name}" if file == "~" else f"{file.rsplit('/', 2)[-1]}:{line}({name})"
        entries.append({"function": function, "calls": calls, "tottime": round(tottime, 3),
                        "cumtime": round(cumtime, 3)})
        category = _category(function)
        by_category[category] = by_category.get(category, 0.0) + tottime
    entries.sort(key=lambda e: -e["tottime"])
    total = sum(by_category.values()) or 1.0
    print(f"[profile] {shape.name}: {events:,} events in {elapsed:.2f}s in one process "
          f"({events / elapsed:,.0f}/s)", flush=True)
    return {"shape": shape.name, "events": events, "seconds": round(elapsed, 3),
            "per_s_one_process": round(events / elapsed),
            "categories": {k: {"seconds": round(v, 3), "share": round(v / total, 3)}
                           for k, v in sorted(by_category.items(), key=lambda kv: -kv[1])},
            "top": entries[:top]}


def profile_shapes(bench: Bench, shapes: list[Shape], events: int) -> list[dict[str, Any]]:
    return [profile_shape(bench, shape, events) for shape in shapes]
