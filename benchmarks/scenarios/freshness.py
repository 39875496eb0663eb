"""Freshness benchmark: time from a record's produce to its appearance in a published segment.

A producer writes events at a steady rate while a supervisor (default period) ingests them.
Every record's acknowledgement time is kept by offset; a watcher polls the committed
offsets, and the moment a partition's committed offset passes a record, that record is
visible to queries. Reports p50/p95/max freshness and the overlord's own overhead per task
(launch to Spark job start, publish time).

    python -m benchmarks.scenarios.freshness --rate 5000 --seconds 60

Results go to results/freshness.json. A long live run, sampled, is ``benchmarks.scenarios.live_freshness``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from confluent_kafka import Producer

from benchmarks.results_file import parse_args, save_results
from indexing_task.spark import get_spark
from overlord.dev.sample_data import create_topic
from overlord.dev.stack import dev_stack
from overlord.supervisor.manager import Overlord
from segment_store import committed_offsets
from specs import load_example


def produce_steadily(bootstrap: str, topic: str, partitions: int, rate: int, seconds: float,
                     acked: dict[tuple[int, int], float]) -> int:
    """Produce ``rate`` events/s for ``seconds``; record each record's ack time by (partition, offset)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})

    def on_delivery(error: Any, message: Any) -> None:
        if error is None:
            acked[(message.partition(), message.offset())] = time.monotonic()

    started, sent = time.monotonic(), 0
    while (elapsed := time.monotonic() - started) < seconds:
        due = int(elapsed * rate)
        while sent < due:
            ts = datetime.now(UTC).isoformat().replace("+00:00", "Z")
            producer.produce(topic, value=json.dumps({"ts": ts, "country": "DE", "device": "mobile",
                                                      "value": sent % 100, "price": 1.0}).encode(),
                             partition=sent % partitions, on_delivery=on_delivery)
            sent += 1
        producer.poll(0.01)
    producer.flush(30)
    # The embedded broker reports the latest offset as "last batch base + 1": end each partition
    # with a record of its own, so the tail of the last batch is visible to the supervisor too.
    for partition in range(partitions):
        producer.produce(topic, value=b'{"ts": "2026-01-01T00:00:00Z"}', partition=partition,
                         on_delivery=on_delivery)
        producer.flush(10)
        sent += 1
    return sent


def watch_commits(engine: sa.Engine, datasource: str, visible: dict[int, list[tuple[float, int]]],
                  stop: threading.Event) -> None:
    """Record (time, committed offset) per partition whenever a committed offset advances.

    Polls once more after ``stop``: the commit that made the caller stop is recorded too.
    """
    last: dict[int, int] = {}
    while True:
        stopping = stop.is_set()
        stored = committed_offsets(engine, datasource)
        now = time.monotonic()
        for p, offset in (stored.offsets.items() if stored else []):
            if offset != last.get(p):
                visible.setdefault(p, []).append((now, offset))
                last[p] = offset
        if stopping:
            return
        time.sleep(0.05)


def run(rate: int, seconds: float, partitions: int, period: str | None) -> dict[str, Any]:
    with dev_stack() as stack:
        engine = sa.create_engine(stack.database_url)
        settings = stack.settings()
        spark = get_spark("local[*]", resident_slots=settings.resident_runner_count)  # else they hold every slot
        overlord = Overlord(settings, engine, spark)
        overlord.start()
        topic = f"fresh-{uuid.uuid4().hex[:8]}"
        create_topic(stack.bootstrap_servers, topic, partitions)
        spec = load_example("events").to_druid_json()
        spec["spec"]["dataSchema"]["dataSource"] = "fresh"
        spec["spec"]["ioConfig"]["topic"] = topic
        if period is None:
            spec["spec"]["ioConfig"].pop("period", None)  # the spec's default (Druid's PT30S)
        else:
            spec["spec"]["ioConfig"]["period"] = period
        period_s = overlord.submit(spec).spec.io_config.period.total_seconds()
        time.sleep(3)  # let the supervisor pin its initial offsets before the first record
        acked: dict[tuple[int, int], float] = {}
        visible: dict[int, list[tuple[float, int]]] = {}
        stop = threading.Event()
        watcher = threading.Thread(target=watch_commits, args=(engine, "fresh", visible, stop))
        watcher.start()
        print(f"producing {rate}/s for {seconds:.0f}s to {partitions} partitions (supervisor period {period_s:.0f}s)")
        sent = produce_steadily(stack.bootstrap_servers, topic, partitions, rate, seconds, acked)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            stored = committed_offsets(engine, "fresh")
            if stored and sum(stored.offsets.values()) >= sent:
                break
            time.sleep(0.2)
        stop.set()
        watcher.join()
        tasks = overlord.store.tasks(datasource="fresh", limit=10_000)
        overlord.stop()
        spark.stop()

    latencies = []
    for (p, offset), acked_at in acked.items():
        seen = next((t for t, committed in visible.get(p, []) if committed > offset), None)
        if seen is None:
            raise RuntimeError(f"record {p}@{offset} was never published")
        latencies.append(seen - acked_at)
    latencies.sort()
    reports = [(t, t.report) for t in tasks if t.report and t.report["publish"] == "ok" and t.report["records"]]
    published = [report for _, report in reports]
    overhead = [(t.finished_at - t.created_at).total_seconds() - r["indexSeconds"] - r["publishSeconds"]
                for t, r in reports if t.finished_at]
    return {
        "benchmark": "freshness", "started": datetime.now(UTC).isoformat(), "rate_per_s": rate,
        "seconds": seconds, "partitions": partitions, "period_s": period_s, "records": sent,
        "freshness_p50_s": round(latencies[len(latencies) // 2], 3),
        "freshness_p95_s": round(latencies[int(len(latencies) * 0.95)], 3),
        "freshness_max_s": round(latencies[-1], 3),
        "tasks": len(published),
        "task_index_seconds_median": round(statistics.median(r["indexSeconds"] for r in published), 3),
        "task_publish_ms_median": round(1000 * statistics.median(r["publishSeconds"] for r in published), 1),
        "task_overhead_seconds_median": round(statistics.median(overhead), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=5_000)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--period", help="supervisor period, e.g. PT5S (default: the spec default)")
    parser.add_argument("--out", help="results file name under benchmarks/results, or a path")
    args = parse_args(parser, {"rate": 200, "seconds": 3, "period": "PT1S"})
    results = run(args.rate, args.seconds, args.partitions, args.period)
    save_results(results, args.out or "freshness.json", args.smoke)


if __name__ == "__main__":
    main()
