"""Exactness against one pass over the raw records: the events spec's rows per (minute, country, device)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import pyarrow as pa
import sqlalchemy as sa
from confluent_kafka import Consumer, TopicPartition

from tests.helpers import published_table

Key = tuple[int, str, str]
"""(minute in epoch ms, country, device): one rolled-up row of the events spec."""


class Expected:
    """One pass over the raw records: per key, count, value sum, min and max, price sum."""

    def __init__(self) -> None:
        self.rows: dict[Key, list[Any]] = {}

    def add(self, records: Iterable[bytes]) -> None:
        for raw in records:
            event = json.loads(raw)
            ts = datetime.fromisoformat(event["ts"])
            minute = int(ts.replace(second=0, microsecond=0).timestamp() * 1000)
            row = self.rows.setdefault((minute, event["country"], event["device"]), [0, 0, None, None, 0.0])
            value = event["value"]
            row[0] += 1
            row[1] += value
            row[2] = value if row[2] is None else min(row[2], value)
            row[3] = value if row[3] is None else max(row[3], value)
            row[4] += event["price"]


def published_rows(engine: sa.Engine, datasource: str) -> dict[Key, list[Any]]:
    """The same aggregates over every visible row, combined per key."""
    return rows_by_key(published_table(engine, datasource))


def rows_by_key(table: pa.Table) -> dict[Key, list[Any]]:
    """The same aggregates over the rows of ``table`` (rolled-up rows of the events spec), combined per key."""
    out: dict[Key, list[Any]] = {}
    for r in table.to_pylist():
        when = r["__time"]
        minute = int(when.timestamp() * 1000) if isinstance(when, datetime) else int(when)
        row = out.setdefault((minute, r["country"], r["device"]), [0, 0, None, None, 0.0])
        row[0] += r["count"]
        row[1] += r["value_sum"]
        row[2] = r["value_min"] if row[2] is None else min(row[2], r["value_min"])
        row[3] = r["value_max"] if row[3] is None else max(row[3], r["value_max"])
        row[4] += r["price_sum"]
    return out


def compare(expected: Expected, found: dict[Key, list[Any]]) -> dict[str, int]:
    """Records lost and duplicated (by count), and keys whose aggregates differ in any way."""
    lost = duplicated = wrong = 0
    for key in expected.rows.keys() | found.keys():
        want, got = expected.rows.get(key, [0, 0, None, None, 0.0]), found.get(key, [0, 0, None, None, 0.0])
        lost += max(0, want[0] - got[0])
        duplicated += max(0, got[0] - want[0])
        if want[:4] != got[:4] or abs(want[4] - got[4]) > 1e-6 * max(1.0, abs(want[4])):
            wrong += 1
    return {"lost": lost, "duplicated": duplicated, "keys_wrong": wrong}


def read_back(bootstrap: str, topic: str, partition: int, start: int, end: int) -> list[bytes]:
    """The records at offsets ``[start, end)`` of one partition."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fault-harness", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, start)])
    out: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(out) < end - start and time.monotonic() < deadline:
        for message in consumer.consume(1000, 1.0):
            if message.error() is None and start <= message.offset() < end:
                out.append(message.value())
    consumer.close()
    assert len(out) == end - start, f"read back {len(out)} of [{start}, {end}) of {topic}[{partition}]"
    return out
