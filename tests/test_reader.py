"""The exact range reader against the real broker."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer

from indexing_task.errors import RangeNotReadableError
from indexing_task.reader import consumer_config, read_range
from overlord.dev.sample_data import produce


def read(bootstrap: str, topic: str, start: int, end: int, stall_timeout_s: float = 10.0) -> list[tuple[int, int]]:
    consumer = Consumer(consumer_config({"bootstrap.servers": bootstrap}, "test-reader"))
    try:
        return [(m.offset(), json.loads(m.value())["i"])
                for batch in read_range(consumer, topic, 0, start, end, stall_timeout_s) for m in batch]
    finally:
        consumer.close()


def test_sub_ranges_read_exactly_their_records(stack, make_topic):
    topic = make_topic(1)
    produce(stack.bootstrap_servers, topic, [json.dumps({"i": i}).encode() for i in range(5_000)], 1)
    cuts = [0, 1, 1_234, 1_235, 4_000, 5_000]

    parts = [read(stack.bootstrap_servers, topic, lo, hi) for lo, hi in zip(cuts, cuts[1:], strict=False)]

    for (lo, hi), part in zip(zip(cuts, cuts[1:], strict=False), parts, strict=True):
        assert [offset for offset, _ in part] == list(range(lo, hi))
    assert [i for part in parts for _, i in part] == list(range(5_000))


def test_empty_range_reads_nothing(stack, make_topic):
    topic = make_topic(1)
    produce(stack.bootstrap_servers, topic, [b'{"i": 0}'], 1)
    assert read(stack.bootstrap_servers, topic, 1, 1) == []


def test_range_past_the_end_of_the_log_fails_loudly(stack, make_topic):
    topic = make_topic(1)
    produce(stack.bootstrap_servers, topic, [json.dumps({"i": i}).encode() for i in range(10)], 1)
    with pytest.raises(RangeNotReadableError, match=r"expected records up to offset 15, found none past 10"):
        read(stack.bootstrap_servers, topic, 5, 15, stall_timeout_s=2)
