"""Ingest benchmark: indexing rate (Kafka -> published segments) against raw consume rate.

For each event shape, produce N events to the embedded broker, then in the same run
measure (a) how fast one confluent-kafka consumer reads the topic's values and nothing
else, and (b) how fast a real indexing task reads, rolls up, writes and publishes the same
records on local Spark. The ratio (b)/(a) is the figure that matters on a shared machine.

    python -m benchmarks.ingest --events 2000000
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from confluent_kafka import Consumer, TopicPartition

from indexing_task.reader import consumer_config, read_range
from indexing_task.spark import get_spark
from indexing_task.task import run_index_task
from overlord.config import Settings
from overlord.dev.sample_data import create_topic, produce
from overlord.dev.stack import dev_stack
from overlord.supervisor.ranges import next_task_request
from segment_store import create_schema
from specs import load_supervisor_spec

RESULTS = Path(__file__).parent / "results"
SHAPES = {"1 low": (1, 0), "10 low + 1 high": (10, 1)}
"""Shape name -> (low-cardinality dimensions, high-cardinality dimensions)."""


def make_events(n: int, low: int, high: int, seed: int = 1) -> list[bytes]:
    """Events over one hour: ``low`` dims with 10-100 values, ``high`` dims with 200k values."""
    rng = random.Random(seed)
    cards = [10 + 10 * (i % 10) for i in range(low)]
    start_ms = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp() * 1000)
    out = []
    for _ in range(n):
        dims = "".join(f',"low{i}":"v{rng.randrange(c)}"' for i, c in enumerate(cards))
        dims += "".join(f',"high{i}":"h{rng.randrange(200_000)}"' for i in range(high))
        out.append(f'{{"ts":{start_ms + rng.randrange(3_600_000)}{dims},"value":{rng.randrange(1000)}}}'.encode())
    return out


def spec_for(datasource: str, topic: str, low: int, high: int) -> Any:
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


def raw_consume_rate(bootstrap: str, topic: str, partitions: int, total: int) -> float:
    """Records/s of one consumer reading every partition's values (the physical limit here)."""
    consumer = Consumer(consumer_config({"bootstrap.servers": bootstrap}, "bench-raw"))
    started = time.monotonic()
    count = 0
    for p in range(partitions):
        end = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
        for batch in read_range(consumer, topic, p, 0, end):
            values = [m.value() for m in batch]
            count += len(values)
    elapsed = time.monotonic() - started
    consumer.close()
    if count != total:
        raise RuntimeError(f"raw consume read {count} records, expected {total}")
    return count / elapsed


def run(events: int, partitions: int) -> dict[str, Any]:
    results: dict[str, Any] = {
        "benchmark": "ingest", "started": datetime.now(UTC).isoformat(), "events": events,
        "partitions": partitions, "machine": {"python": platform.python_version(),
                                              "platform": platform.platform(), "cpus": _cpus()},
        "shapes": {}}
    with dev_stack() as stack:
        engine = sa.create_engine(stack.database_url)
        create_schema(engine)
        settings = stack.settings()
        spark = get_spark("local[*]")
        _warm_up(spark, engine, settings, stack.bootstrap_servers)
        for name, (low, high) in SHAPES.items():
            topic = f"bench-{uuid.uuid4().hex[:8]}"
            print(f"[{name}] generating {events:,} events", flush=True)
            records = make_events(events, low, high)
            create_topic(stack.bootstrap_servers, topic, partitions)
            started = time.monotonic()
            produce(stack.bootstrap_servers, topic, records, partitions)
            produce_rate = events / (time.monotonic() - started)
            del records
            print(f"[{name}] produced at {produce_rate:,.0f}/s; measuring raw consume", flush=True)
            raw = raw_consume_rate(stack.bootstrap_servers, topic, partitions, events)
            print(f"[{name}] raw consume {raw:,.0f}/s; indexing", flush=True)
            request = next_task_request(engine, settings, spec_for(f"bench_{topic[6:]}", topic, low, high))
            started = time.monotonic()
            report = run_index_task(spark, engine, request)
            elapsed = time.monotonic() - started
            if not report.outcome.ok or report.records != events:
                raise RuntimeError(f"indexing failed: {report.outcome} after {report.records} records")
            rate = events / elapsed
            results["shapes"][name] = {
                "produce_per_s": round(produce_rate), "raw_consume_per_s": round(raw),
                "indexing_per_s": round(rate), "indexing_over_raw": round(rate / raw, 3),
                "indexing_seconds": round(elapsed, 2), "publish_ms": round(report.publish_seconds * 1000, 1),
                "rows_out": report.rows_out, "segments": len(report.segments)}
            print(f"[{name}] indexing {rate:,.0f}/s = {rate / raw:.2f} x raw consume "
                  f"({report.rows_out:,} rows in {len(report.segments)} segments, {elapsed:.1f}s)", flush=True)
        spark.stop()
    return results


def _warm_up(spark: Any, engine: sa.Engine, settings: Settings, bootstrap: str) -> None:
    """Start Spark's Python workers once, so the first measured task does not pay for it."""
    topic = f"warmup-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, make_events(1_000, 1, 0), 2)
    run_index_task(spark, engine, next_task_request(engine, settings, spec_for("warmup", topic, 1, 0)))


def _cpus() -> int:
    import os

    return os.cpu_count() or 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    results = run(args.events, args.partitions)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "ingest.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results["shapes"], indent=2))
    print(f"written to {out}")


if __name__ == "__main__":
    main()
