"""One measurement run on one topic: every system reads the same records, one after another.

A :class:`Bench` holds the running embedded stack, the metadata store and the warm Spark
session. :func:`measure_shape` produces a topic of one shape and measures, in this order,
the raw consume rates, consume + bulk parse, the plain loop, our indexing task (Kafka ->
published segments) and, when asked, the Quix Streams peer in both guarantees; then it
checks that every system published the same aggregates as ours.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import duckdb
import sqlalchemy as sa

from benchmarks.peers import baselines, quix_peer
from benchmarks.suite import aggregates
from benchmarks.suite.shapes import Shape, generate, shape_by_name
from benchmarks.suite.topics import create_topic, delete_topics, end_offsets, produce
from indexing_task.spark import get_spark
from indexing_task.task import run_index_task
from overlord.config import Settings
from overlord.dev.stack import DevStack, dev_stack
from overlord.supervisor.task_ranges import next_task_request
from specs import SupervisorSpec, load_supervisor_spec

__all__ = ["Bench", "fixed_cost", "index_topic", "measure_shape", "new_topic", "scratch_stack"]

GUARANTEES: tuple[quix_peer.Guarantee, ...] = ("at-least-once", "exactly-once")


@dataclass
class Bench:
    bootstrap: str
    engine: sa.Engine
    settings: Settings
    partitions: int
    spark: Any = None
    spark_cores: int = 0
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="bench_")))

    def use_spark(self, cores: int) -> None:
        """A warm ``local[cores]`` session (restarts Spark if it runs with another core count)."""
        if self.spark is not None and self.spark_cores == cores:
            return
        if self.spark is not None:
            self.spark.stop()
        self.spark = get_spark(f"local[{cores}]")
        self.spark_cores = cores
        _warm_up(self.spark, self.engine, self.settings, self.bootstrap)
        _wait_for_quiet_jvm()


def _jvm_cpu_seconds() -> float:
    """CPU seconds used so far by this process's JVM children (Spark's driver JVM)."""
    total = 0.0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if fields[1] != str(os.getpid()):
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"java" not in f.read():
                    continue
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            continue
    return total


def _wait_for_quiet_jvm(limit_s: float = 60.0) -> None:
    """A fresh JVM compiles (JIT) for a while and takes most of a core: measure after it settles."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        used = _jvm_cpu_seconds()
        time.sleep(1.0)
        if _jvm_cpu_seconds() - used < 0.1:
            return


@contextmanager
def scratch_stack() -> Iterator[tuple[DevStack, Path]]:
    """The embedded stack and a work directory, both under one temporary directory removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="bench_"))
    root.chmod(0o755)  # PostgreSQL runs as nobody when we are root: its parents must be traversable
    try:
        with dev_stack(root / "stack") as stack:
            yield stack, root / "work"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def new_topic(bench: Bench, shape: Shape, events: int, seed: int = 1) -> dict[str, Any]:
    """Generate and produce ``events`` records of ``shape``; return the topic and produce figures."""
    topic = f"bench-{uuid.uuid4().hex[:10]}"
    records = generate(shape, events, seed=seed)
    size = sum(map(len, records))
    create_topic(bench.bootstrap, topic, bench.partitions)
    started = time.monotonic()
    produce(bench.bootstrap, topic, records, bench.partitions)
    produce_rate = events / (time.monotonic() - started)
    del records
    ends = end_offsets(bench.bootstrap, topic)
    if sum(ends.values()) != events:
        raise RuntimeError(f"{topic}: the broker reports {sum(ends.values())} records, produced {events}")
    return {"topic": topic, "ends": ends, "bytes_per_event": round(size / events, 1),
            "produce_per_s": round(produce_rate)}


def index_topic(bench: Bench, shape: Shape, topic: str, events: int) -> dict[str, Any]:
    """Our indexing task over the whole topic on the warm session: Kafka -> published segments."""
    datasource = f"bench_{uuid.uuid4().hex[:10]}"
    request = next_task_request(bench.engine, bench.settings, spec_for(datasource, topic, shape.low, shape.high))
    started = time.monotonic()
    report = run_index_task(bench.spark, bench.engine, request)
    elapsed = time.monotonic() - started
    if not report.outcome.ok or report.records != events or report.unparseable or report.thrown_away:
        raise RuntimeError(f"indexing {topic}: {report.outcome} after {report.records} of {events} records, "
                           f"{report.unparseable} unparseable, {report.thrown_away} thrown away")
    return {"datasource": datasource, "per_s": round(events / elapsed), "seconds": round(elapsed, 3),
            "spark_seconds": round(report.index_seconds, 3), "publish_ms": round(report.publish_seconds * 1000, 1),
            "rows_out": report.rows_out, "segments": len(report.segments)}


def fixed_cost(bench: Bench, events: int = 1_000, repeat: int = 3) -> dict[str, Any]:
    """Seconds of a task over a tiny topic: Spark's job overhead plus each split's setup."""
    shape = shape_by_name("1 low")
    made = new_topic(bench, shape, events)
    seconds = sorted(index_topic(bench, shape, made["topic"], events)["seconds"] for _ in range(repeat))
    delete_topics(bench.bootstrap, [made["topic"]])
    return {"events": events, "seconds_median": seconds[len(seconds) // 2], "seconds": seconds}


def _log(shape: Shape, text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] [{shape.name}] {text}", flush=True)


def _best_rate(measure: Callable[[], float], repeat: int) -> tuple[int, list[int]]:
    """The best of ``repeat`` rates (this machine is shared: noise only ever slows a run down)."""
    rates = [round(measure()) for _ in range(max(repeat, 1))]
    return max(rates), rates


def measure_shape(bench: Bench, shape: Shape, events: int, *, quix: bool = False,
                  keep_topic: bool = False, repeat: int = 1) -> dict[str, Any]:
    """Every system on one freshly produced topic of ``shape``; figures and aggregate checks.

    Each system but Quix runs ``repeat`` times in a row and keeps its best rate; all rates are kept too.
    """
    _log(shape, f"producing {events:,} events")
    out: dict[str, Any] = {"shape": shape.name, "low": shape.low, "high": shape.high, "events": events,
                           "partitions": bench.partitions, "spark_cores": bench.spark_cores, "repeat": repeat}
    made = new_topic(bench, shape, events)
    topic, ends = made.pop("topic"), made.pop("ends")
    out.update(made)
    raw = partial(baselines.raw_consume_rate, bench.bootstrap, topic, ends)
    for key, measure in (("raw_consume", raw), ("raw_consume_default_gc", partial(raw, pause_gc=False)),
                         ("raw_consume_2proc", partial(baselines.raw_consume_parallel, bench.bootstrap, topic, ends)),
                         ("consume_parse", partial(baselines.consume_parse_rate, bench.bootstrap, topic, ends))):
        out[f"{key}_per_s"], out[f"{key}_runs"] = _best_rate(measure, repeat)
    _log(shape, f"raw {out['raw_consume_per_s']:,}/s (default GC {out['raw_consume_default_gc_per_s']:,}/s), "
                f"2 processes {out['raw_consume_2proc_per_s']:,}/s, consume+parse {out['consume_parse_per_s']:,}/s")
    work = bench.workdir / topic.replace("-", "_")  # Quix file sinks accept [a-zA-Z0-9 ._/] only
    for key, pause in (("plain_loop_default_gc", False), ("plain_loop", True)):  # the paused one is checked
        plain_runs = [baselines.plain_loop(bench.bootstrap, topic, ends, shape, work / f"{key}{i}.parquet", pause)
                      for i in range(max(repeat, 1))]
        plain_result = max(plain_runs, key=lambda r: r.rate)
        out[key] = {"per_s": round(plain_result.rate), "seconds": round(plain_result.seconds, 3),
                    "rows_out": plain_result.rows_out, "runs": [round(r.rate) for r in plain_runs]}
    _log(shape, f"plain loop {out['plain_loop']['per_s']:,}/s (default GC {out['plain_loop_default_gc']['per_s']:,}/s)")
    runs = [index_topic(bench, shape, topic, events) for _ in range(max(repeat, 1))]
    ours = max(runs, key=lambda r: r["per_s"])
    out["indexing"] = {**ours, "runs": [r["per_s"] for r in runs]}
    _log(shape, f"indexing {ours['per_s']:,}/s ({ours['rows_out']:,} rows, {ours['seconds']:.2f}s)")
    quix_runs = []
    if quix:
        for guarantee in GUARANTEES:
            run = quix_peer.run_quix(bench.bootstrap, topic, shape, events, bench.partitions, guarantee,
                                     work / guarantee.replace("-", "_"))
            quix_runs.append(run)
            out[f"quix_{guarantee.replace('-', '_')}"] = {
                "per_s": round(run.rate), "process_seconds": round(run.process_seconds, 3),
                "close_seconds": round(run.close_seconds, 3), "startup_seconds": round(run.startup_seconds, 3)}
            _log(shape, f"quix {guarantee} {run.rate:,.0f}/s")
    out["checks"] = _check_aggregates(bench, shape, ours["datasource"], plain_result, quix_runs)
    if not keep_topic:
        delete_topics(bench.bootstrap, [topic])
    else:
        out["topic"] = topic
    return out


def _check_aggregates(bench: Bench, shape: Shape, datasource: str, plain: baselines.PlainLoopResult,
                      quix_runs: list[quix_peer.QuixRun]) -> dict[str, Any]:
    con = duckdb.connect(config={"threads": 2})
    try:
        checks: dict[str, Any] = {"ours_rows": aggregates.load_ours(con, "ours", bench.engine, datasource, shape)}
        aggregates.load_parquet(con, "plain", [plain.path], shape)
        checks["plain_loop"] = aggregates.compare(con, "ours", "plain")
        for run in quix_runs:
            name = "quix_" + run.guarantee.replace("-", "_")
            aggregates.load_sql(con, name, quix_peer.quix_source(run, shape), shape)
            checks[name] = aggregates.compare(con, "ours", name)
        _log(shape, "aggregates: " + ", ".join(
            f"{k} {'equal' if v['equal'] else 'DIFFERENT'}" for k, v in checks.items() if isinstance(v, dict)))
        return checks
    finally:
        con.close()


def spec_for(datasource: str, topic: str, low: int, high: int) -> SupervisorSpec:
    """The benchmark spec: ``low`` + ``high`` string dimensions, count and value sum/min/max, MINUTE rollup."""
    dims = [f"low{i}" for i in range(low)] + [f"high{i}" for i in range(high)]
    return load_supervisor_spec({"type": "kafka", "spec": {
        "dataSchema": {
            "dataSource": datasource,
            "timestampSpec": {"column": "ts", "format": "millis"},
            "dimensionsSpec": {"dimensions": dims},
            "metricsSpec": [{"type": "count", "name": "count"},
                            {"type": "longSum", "name": "value_sum", "fieldName": "value"},
                            {"type": "longMin", "name": "value_min", "fieldName": "value"},
                            {"type": "longMax", "name": "value_max", "fieldName": "value"}],
            "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "MINUTE"}},
        "ioConfig": {"topic": topic, "useEarliestOffset": True},
        "tuningConfig": {"maxRowsInMemory": 1_000_000}}})


def _warm_up(spark: Any, engine: sa.Engine, settings: Settings, bootstrap: str) -> None:
    """Start Spark's Python workers once, so the first measured task does not pay for it.

    Each warm-up has a topic and a datasource of its own: a datasource keeps the offsets of its topic,
    so a second warm-up (the cores phase restarts Spark) reusing one would read another topic.
    """
    name = f"warmup_{uuid.uuid4().hex[:8]}"
    topic = name.replace("_", "-")
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, generate(shape_by_name("1 low"), 1_000), 2)
    run_index_task(spark, engine, next_task_request(engine, settings, spec_for(name, topic, 1, 0)))
