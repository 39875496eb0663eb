"""Sample events for the demo, tests and benchmarks; a producer that makes end offsets exact; a live one."""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

__all__ = ["SampleEvents", "create_topic", "make_sample_events", "produce", "produce_live"]

COUNTRIES = ("DE", "FR", "GB", "IN", "JP", "NL", "US", "BR")
DEVICES = ("desktop", "mobile", "tablet")


@dataclass
class SampleEvents:
    """Records to produce, and the exact aggregates a correct indexer must publish for them."""

    records: list[bytes] = field(default_factory=list)
    count_by_country: Counter[str] = field(default_factory=Counter)
    value_by_country: Counter[str] = field(default_factory=Counter)
    price_by_country: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    bad: int = 0


def make_sample_events(n: int, bad_every: int = 5_000, seed: int = 7,
                       start: datetime = datetime(2026, 11, 1, tzinfo=UTC)) -> SampleEvents:
    """``n`` good events over two hours (country, device, value, price) plus bad records.

    Every ``bad_every``-th position also gets one malformed record, alternating between
    invalid JSON and an event without a timestamp.
    """
    rng = random.Random(seed)
    out = SampleEvents()
    for i in range(n):
        country, device = rng.choice(COUNTRIES), rng.choice(DEVICES)
        value, price = rng.randint(-50, 1000), round(rng.random() * 100, 2)
        ts = start + timedelta(milliseconds=rng.randrange(2 * 3600 * 1000))
        out.records.append(json.dumps({
            "ts": ts.isoformat().replace("+00:00", "Z"), "country": country, "device": device,
            "value": value, "price": price}).encode())
        out.count_by_country[country] += 1
        out.value_by_country[country] += value
        out.price_by_country[country] += price
        if bad_every and i % bad_every == bad_every - 1:
            out.records.append(b'{"ts": "2026-11-01T00:00:00Z", "country": ' if out.bad % 2 == 0
                               else json.dumps({"country": country, "value": 1}).encode())
            out.bad += 1
    return out


def create_topic(bootstrap_servers: str, topic: str, partitions: int, config: Mapping[str, str] | None = None) -> None:
    """Create ``topic`` with ``partitions`` partitions (and topic ``config``) on the broker."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    for future in admin.create_topics([NewTopic(topic, partitions, 1, config=dict(config or {}))]).values():
        future.result(timeout=10)


def produce(bootstrap_servers: str, topic: str, records: Sequence[bytes], partitions: int) -> None:
    """Produce ``records`` round-robin over ``partitions`` and wait until all are acknowledged.

    The last record of each partition is produced and flushed on its own, so a broker that
    reports the latest offset as "last batch base + 1" (the embedded Tansu build) still
    reports the exact end.
    """
    producer = Producer({"bootstrap.servers": bootstrap_servers, "linger.ms": 20,
                         "batch.num.messages": 10_000, "queue.buffering.max.messages": 1_000_000,
                         "compression.type": "none"})
    failures: list[str] = []

    def on_delivery(error: object, _message: object) -> None:
        if error is not None:
            failures.append(str(error))

    last: dict[int, bytes] = {}
    body = len(records) - min(partitions, len(records))
    for i, record in enumerate(records):
        partition = i % partitions
        if i >= body:
            last[partition] = record
            continue
        while True:
            try:
                producer.produce(topic, value=record, partition=partition, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(60) != 0:
        raise RuntimeError(f"producing to {topic}: records still unacknowledged after 60s")
    for partition, record in sorted(last.items()):
        producer.produce(topic, value=record, partition=partition, on_delivery=on_delivery)
        producer.flush(10)
    if failures:
        raise RuntimeError(f"producing to {topic}: {len(failures)} records failed, first: {failures[0]}")


def produce_live(bootstrap_servers: str, topic: str, partitions: int, rate: int, stop: threading.Event,
                 seed: int = 7) -> int:
    """Send sample events stamped with the current time, ``rate`` a second, until ``stop``; the number sent."""
    rng = random.Random(seed)
    producer = Producer({"bootstrap.servers": bootstrap_servers, "linger.ms": 20})
    started, sent = time.monotonic(), 0
    while not stop.wait(0.05):
        due = int((time.monotonic() - started) * rate)
        for _ in range(due - sent):
            ts = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
            producer.produce(topic, json.dumps({
                "ts": ts, "country": rng.choice(COUNTRIES), "device": rng.choice(DEVICES),
                "value": rng.randint(-50, 1000), "price": round(rng.random() * 100, 2)}).encode(),
                partition=sent % partitions)
            sent += 1
        producer.poll(0)
    producer.flush(10)
    return sent
