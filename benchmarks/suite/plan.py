"""The whole suite: Druid's table, the physical limit, the peers, scaling and the profile.

Everything runs in one process against one embedded stack (Tansu broker, PostgreSQL) and
a warm local Spark session, so every ratio compares figures measured minutes apart on the
same machine under the same load.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from benchmarks.peers.baselines import raw_consume_rate
from benchmarks.suite import machine
from benchmarks.suite.runs import Bench, fixed_cost, index_topic, measure_shape, new_topic, scratch_stack
from benchmarks.suite.shapes import DRUID_SHAPES, Shape, shape_by_name
from benchmarks.suite.topics import delete_topics
from segment_store import upgrade_schema

__all__ = ["Options", "run_suite"]

TARGET_SHAPES = ("1 low", "10 low + 1 high")


@dataclass
class Options:
    events: int = 1_000_000
    """Events per Druid shape."""
    peer_events: int = 500_000
    """Events of the topic on which the Quix Streams peer runs (one per target shape)."""
    shapes: list[str] = field(default_factory=lambda: [s.name for s in DRUID_SHAPES])
    peer_shapes: list[str] = field(default_factory=lambda: list(TARGET_SHAPES))
    partitions: int = 4
    cores: bool = True
    """Indexing with 1 and 2 Spark cores on the target shapes."""
    scaling: list[int] = field(default_factory=list)
    """Event counts of the growth series (1 low-cardinality dimension), e.g. 1M, 4M, 16M."""
    profile: bool = True
    profile_events: int = 500_000
    repeat: int = 2
    """Runs of each system but Quix per topic (the best rate counts)."""


def run_suite(options: Options) -> dict[str, Any]:
    results: dict[str, Any] = {
        "suite": "benchmarks", "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "parameters": asdict(options), "machine": machine.info(), "versions": machine.versions(),
        "druid": [], "peers": [], "scaling": {}}
    cores = results["machine"]["cpus"]
    with scratch_stack() as (stack, workdir):
        engine = sa.create_engine(stack.database_url)
        upgrade_schema(engine)
        settings = stack.settings()
        bench = Bench(stack.bootstrap_servers, engine, settings, options.partitions, workdir=workdir)
        bench.use_spark(cores)
        results["task_fixed_cost"] = fixed_cost(bench)
        kept: dict[str, str] = {}
        for name in options.shapes:
            shape = shape_by_name(name)
            keep = options.cores and name in TARGET_SHAPES
            row = measure_shape(bench, shape, options.events, keep_topic=keep, repeat=options.repeat)
            if keep:
                kept[name] = row.pop("topic")
            row["druid_per_task"] = shape.druid_per_task
            results["druid"].append(row)
        for name in options.peer_shapes:
            results["peers"].append(measure_shape(bench, shape_by_name(name), options.peer_events, quix=True,
                                                 repeat=options.repeat))
        if options.profile:
            from benchmarks.suite.profiling import profile_shapes

            results["profile"] = profile_shapes(bench, [shape_by_name(n) for n in TARGET_SHAPES],
                                                options.profile_events)
        if options.scaling:
            results["scaling"]["growth"] = _growth(bench, options.scaling, cores)
        if kept:
            results["scaling"]["cores"] = _cores(bench, kept, options.events, cores, options.repeat)
        delete_topics(bench.bootstrap, list(kept.values()))
        if bench.spark is not None:
            bench.spark.stop()
    results["scaling"]["spark_standalone"] = (
        "measured separately: `python -m benchmarks.scenarios.cluster` (results/cluster.json), local[2] and "
        "a two-worker cluster on the same topic")
    results["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
    results["machine"]["load_average_end"] = machine.load_average()
    return results


def _cores(bench: Bench, topics: dict[str, str], events: int, max_cores: int, repeat: int) -> list[dict[str, Any]]:
    """The same topics indexed on 1 core, then on all cores again, back to back."""
    rows = []
    for cores in sorted({1, max_cores}):
        bench.use_spark(cores)
        for name, topic in topics.items():
            runs = [index_topic(bench, shape_by_name(name), topic, events) for _ in range(max(repeat, 1))]
            ours = max(runs, key=lambda r: r["per_s"])
            rows.append({"shape": name, "spark_cores": cores, "events": events, **ours,
                         "runs": [r["per_s"] for r in runs]})
            print(f"[scaling] {name} on {cores} core(s): {ours['per_s']:,}/s", flush=True)
    return rows


def _growth(bench: Bench, counts: list[int], cores: int) -> list[dict[str, Any]]:
    """Total indexing time of 1 low-cardinality dimension as the topic grows."""
    bench.use_spark(cores)
    shape: Shape = shape_by_name("1 low")
    rows = []
    for events in counts:
        made = new_topic(bench, shape, events)
        raw = raw_consume_rate(bench.bootstrap, made["topic"], made["ends"])
        started = time.monotonic()
        ours = index_topic(bench, shape, made["topic"], events)
        wall = time.monotonic() - started
        rows.append({"events": events, "raw_consume_per_s": round(raw), "wall_seconds": round(wall, 3),
                     "produce_per_s": made["produce_per_s"], **ours})
        print(f"[scaling] {events:,} events: {ours['seconds']:.1f}s ({ours['per_s']:,}/s; raw {raw:,.0f}/s)",
              flush=True)
        delete_topics(bench.bootstrap, [made["topic"]])
    return rows
