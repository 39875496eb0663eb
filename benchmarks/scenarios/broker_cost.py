"""What reading a trickle costs the embedded broker: a consumer kept at the tail against our periodic reads.

Tansu's in-memory engine (the dev stack's broker) pays for every fetch and every offset look-up
with a scan of the partition's record batches, so its cost grows with the log. This fills one
partition with ``--batches`` single-record batches (what a producer with a 5 ms linger makes at
a few hundred records a second), feeds it ``--rate`` records/s, and reads the broker's CPU for
``--seconds`` in each mode:

- ``producer_only``: the trickle alone;
- ``tailing_consumer``: plus one consumer kept at the tail, as a Druid task, a Kafka Connect sink or
  a hand-written consumer reads (each fetch is answered as soon as a record arrives);
- ``indexer_cycle``: plus, every ``--interval-s``, what a supervisor and its task do: one look at the
  latest offset (the earliest known) and one read of the new range by a new consumer.

    python -m benchmarks.scenarios.broker_cost --batches 12000
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import psutil
from confluent_kafka import Consumer, Producer, TopicPartition

from benchmarks.results_file import parse_args, save_results
from indexing_task.reader import consumer_config, read_ranges
from indexing_task.watermarks import close_metadata_clients, stream_watermarks
from overlord.dev.sample_data import create_topic
from overlord.dev.stack import TansuBroker
from specs import KafkaIOConfigSpec


def _fill(bootstrap: str, topic: str, batches: int) -> None:
    """``batches`` record batches of one record each (one produce request per record)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for n in range(batches):
        producer.produce(topic, b'{"n": %d}' % n, partition=0)
        producer.flush()
        if n % 2000 == 0:
            print(f"  {n}/{batches} batches", flush=True)


def _trickle(bootstrap: str, topic: str, rate: int, stop: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    started, sent = time.monotonic(), 0
    while not stop.is_set():
        while sent < int((time.monotonic() - started) * rate):
            producer.produce(topic, b'{"n": 0}', partition=0)
            sent += 1
        producer.poll(0.004)
    producer.flush(10)


def _tail(bootstrap: str, topic: str, stop: threading.Event) -> None:
    consumer = Consumer(consumer_config({}, "tail") | {"bootstrap.servers": bootstrap})
    _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    consumer.assign([TopicPartition(topic, 0, high)])
    while not stop.is_set():
        consumer.consume(1000, 0.1)
    consumer.close()


def _cycle(bootstrap: str, topic: str, interval_s: float, stop: threading.Event) -> None:
    properties, io = {"bootstrap.servers": bootstrap}, KafkaIOConfigSpec(topic=topic)
    low, at = stream_watermarks(properties, io)[0]
    while not stop.wait(interval_s):
        _, end = stream_watermarks(properties, io, known_lows={0: low})[0]
        consumer = Consumer(consumer_config({}, "cycle") | {"bootstrap.servers": bootstrap})
        try:
            for _ in read_ranges(consumer, [(topic, 0, at, end)]):
                pass
        finally:
            consumer.close()
        at = end


def _cores(broker: psutil.Process, seconds: float, reader: Callable[[threading.Event], None] | None) -> float:
    """The broker's CPU (cores) over ``seconds`` while ``reader`` runs (after 2 s of its start)."""
    stop = threading.Event()
    thread = threading.Thread(target=reader, args=(stop,)) if reader else None
    if thread:
        thread.start()
    time.sleep(2)
    used = sum(broker.cpu_times()[:2])
    time.sleep(seconds)
    cores = (sum(broker.cpu_times()[:2]) - used) / seconds
    stop.set()
    if thread:
        thread.join()
    return round(cores, 3)


def run(batches: int, rate: int, seconds: float, interval_s: float) -> dict[str, Any]:
    started = datetime.now(UTC).isoformat()
    broker = TansuBroker()
    broker.start()
    try:
        bootstrap, topic = broker.bootstrap_servers, f"broker-cost-{uuid.uuid4().hex[:6]}"
        create_topic(bootstrap, topic, 1)
        print(f"filling {topic} with {batches} batches")
        _fill(bootstrap, topic, batches)
        stop = threading.Event()
        trickle = threading.Thread(target=_trickle, args=(bootstrap, topic, rate, stop))
        trickle.start()
        process = psutil.Process(broker.pid)
        try:
            modes = {"producer_only": _cores(process, seconds, None),
                     "tailing_consumer": _cores(process, seconds, lambda s: _tail(bootstrap, topic, s)),
                     "indexer_cycle": _cores(process, seconds, lambda s: _cycle(bootstrap, topic, interval_s, s))}
        finally:
            stop.set()
            trickle.join()
            close_metadata_clients()
    finally:
        broker.stop()
    tail, cycle = (modes[m] - modes["producer_only"] for m in ("tailing_consumer", "indexer_cycle"))
    return {"benchmark": "broker_cost", "started": started, "batches": batches, "rate_per_s": rate,
            "measured_s_per_mode": seconds, "interval_s": interval_s, "broker_cores": modes,
            "added_by_tailing_consumer": round(tail, 3), "added_by_indexer_cycle": round(cycle, 3),
            "tailing_over_indexer": round(tail / cycle, 1) if cycle > 0 else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=12_000, help="record batches in the partition before")
    parser.add_argument("--rate", type=int, default=250, help="records/s into the partition meanwhile")
    parser.add_argument("--seconds", type=float, default=15, help="measured per mode")
    parser.add_argument("--interval-s", type=float, default=1.5, help="between two looks and reads (the "
                        "supervisor's OVERLORD_TASK_MIN_INTERVAL_S)")
    parser.add_argument("--out", default="broker_cost.json", help="results file under benchmarks/results, or a path")
    args = parse_args(parser, {"batches": 50, "seconds": 1.5, "interval_s": 0.5})
    save_results(run(args.batches, args.rate, args.seconds, args.interval_s), args.out, args.smoke)


if __name__ == "__main__":
    main()
