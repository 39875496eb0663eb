"""The physical limit and the plain-Python baseline, on the topic every system reads.

- raw consume: confluent-kafka reads the values and nothing else, with one consumer in one
  process, and with one consumer in each of two processes (this machine's two cores);
- consume + bulk parse: one consumer, values joined and parsed by ``pyarrow.json``;
- plain loop: what a Python user writes without a framework: one consumer, ``orjson`` per
  record, a dict keyed by (minute, dimensions) holding count/sum/min/max, Parquet out.

All read exactly ``[0, end)`` of every partition with the indexer's reader settings. By
default with Python's cyclic garbage collector paused, as our worker runs (the collector costs
a message-heavy loop up to half its CPU); ``pause_gc=False`` measures Python's default.
"""

from __future__ import annotations

import io
import multiprocessing as mp
import operator
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.json as pj
import pyarrow.parquet as pq
from confluent_kafka import Consumer

from benchmarks.suite.shapes import Shape
from indexing_task.reader import consumer_config, read_range
from indexing_task.spark_worker import cyclic_gc_paused

__all__ = ["PlainLoopResult", "consume_parse_rate", "plain_loop", "raw_consume_parallel",
           "raw_consume_rate"]

PARSE_BATCH = 100_000


def _consumer(bootstrap: str, name: str) -> Consumer:
    return Consumer(consumer_config({"bootstrap.servers": bootstrap}, name))


def _read_values(bootstrap: str, topic: str, ends: Mapping[int, int], pause_gc: bool = True) -> int:
    consumer = _consumer(bootstrap, "bench-raw")
    count = 0
    try:
        with cyclic_gc_paused(pause_gc):
            for partition, end in sorted(ends.items()):
                for batch in read_range(consumer, topic, partition, 0, end):
                    values = [m.value() for m in batch]
                    count += len(values)
    finally:
        consumer.close()
    return count


def _check(what: str, count: int, ends: Mapping[int, int]) -> None:
    if count != sum(ends.values()):
        raise RuntimeError(f"{what} read {count} records, expected {sum(ends.values())}")


def raw_consume_rate(bootstrap: str, topic: str, ends: Mapping[int, int], pause_gc: bool = True) -> float:
    """Records/s of one consumer reading every partition's values, one partition after another."""
    started = time.monotonic()
    count = _read_values(bootstrap, topic, ends, pause_gc)
    elapsed = time.monotonic() - started
    _check("raw consume", count, ends)
    return count / elapsed


def _raw_child(bootstrap: str, topic: str, ends: dict[int, int], barrier: object, results: object) -> None:
    consumer = _consumer(bootstrap, "bench-raw-parallel")
    consumer.list_topics(topic, timeout=10)  # connect before the clock starts
    consumer.close()
    barrier.wait()  # type: ignore[attr-defined]
    count = _read_values(bootstrap, topic, ends)
    results.put((count, time.time()))  # type: ignore[attr-defined]


def raw_consume_parallel(bootstrap: str, topic: str, ends: Mapping[int, int], processes: int = 2) -> float:
    """Records/s of ``processes`` consumers in separate processes, each reading some partitions."""
    ctx = mp.get_context("spawn")
    shares = [{p: e for p, e in ends.items() if p % processes == i} for i in range(processes)]
    shares = [share for share in shares if share]
    barrier, results = ctx.Barrier(len(shares) + 1), ctx.Queue()
    children = [ctx.Process(target=_raw_child, args=(bootstrap, topic, share, barrier, results))
                for share in shares]
    for child in children:
        child.start()
    barrier.wait(timeout=120)
    started = time.time()
    done = [results.get(timeout=600) for _ in children]
    for child in children:
        child.join(timeout=30)
    count = sum(c for c, _ in done)
    _check("parallel raw consume", count, ends)
    return count / (max(t for _, t in done) - started)


def consume_parse_rate(bootstrap: str, topic: str, ends: Mapping[int, int]) -> float:
    """Records/s of one consumer whose values are parsed in bulk by pyarrow.json."""
    consumer = _consumer(bootstrap, "bench-parse")
    started = time.monotonic()
    count = rows = 0
    pending: list[bytes] = []

    def parse() -> int:
        table = pj.read_json(io.BytesIO(b"\n".join(pending)))
        pending.clear()
        return table.num_rows

    try:
        with cyclic_gc_paused():
            for partition, end in sorted(ends.items()):
                for batch in read_range(consumer, topic, partition, 0, end):
                    pending.extend(m.value() for m in batch)
                    count += len(batch)
                    if len(pending) >= PARSE_BATCH:
                        rows += parse()
            if pending:
                rows += parse()
    finally:
        consumer.close()
    elapsed = time.monotonic() - started
    _check("consume + parse", count, ends)
    if rows != count:
        raise RuntimeError(f"consume + parse: {rows} rows parsed from {count} records")
    return count / elapsed


@dataclass(frozen=True)
class PlainLoopResult:
    rate: float
    seconds: float
    rows_out: int
    path: Path


def plain_loop(bootstrap: str, topic: str, ends: Mapping[int, int], shape: Shape, out: Path,
               pause_gc: bool = True) -> PlainLoopResult:
    """The job in one process: orjson per record, dict aggregation, one Parquet file."""
    import orjson  # the bench extra: only the suite's plain loop needs it, the scenarios import this module too

    dims = shape.dimensions
    key_of = operator.itemgetter(*dims)
    loads = orjson.loads
    consumer = _consumer(bootstrap, "bench-plain")
    started = time.monotonic()
    agg: dict[tuple[int, object], list[int]] = {}
    count = 0
    try:
        with cyclic_gc_paused(pause_gc):
            for partition, end in sorted(ends.items()):
                for batch in read_range(consumer, topic, partition, 0, end):
                    count += len(batch)
                    for message in batch:
                        event = loads(message.value())
                        key = (event["ts"] // 60_000 * 60_000, key_of(event))
                        value = event["value"]
                        acc = agg.get(key)
                        if acc is None:
                            agg[key] = [1, value, value, value]
                        else:
                            acc[0] += 1
                            acc[1] += value
                            if value < acc[2]:
                                acc[2] = value
                            elif value > acc[3]:
                                acc[3] = value
    finally:
        consumer.close()
    _write_plain(agg, dims, out)
    elapsed = time.monotonic() - started
    _check("plain loop", count, ends)
    return PlainLoopResult(count / elapsed, elapsed, len(agg), out)


def _write_plain(agg: dict[tuple[int, object], list[int]], dims: list[str], out: Path) -> None:
    keys = list(agg)
    columns: dict[str, list[object]] = {"minute_ms": [k[0] for k in keys]}
    if len(dims) == 1:
        columns[dims[0]] = [k[1] for k in keys]
    else:
        for i, name in enumerate(dims):
            columns[name] = [k[1][i] for k in keys]  # type: ignore[index]
    accs = list(agg.values())
    for i, name in enumerate(("cnt", "vsum", "vmin", "vmax")):
        columns[name] = [a[i] for a in accs]
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), out, compression="zstd")
