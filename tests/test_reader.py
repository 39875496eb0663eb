"""The exact range reader against the real broker."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer

from indexing_task.reader import consumer_config, read_range, read_ranges
from indexing_task.task_errors import RangeNotReadableError
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


def read_together(consumer: Consumer, ranges: list[tuple[str, int, int, int]], stall_timeout_s: float = 10.0,
                  highs: dict[int, int] | None = None) -> list[list[int]]:
    """Each range's offsets as :func:`read_ranges` yields them."""
    offsets: list[list[int]] = [[] for _ in ranges]
    for i, batch in read_ranges(consumer, ranges, stall_timeout_s, highs=highs):
        offsets[i].extend(m.offset() for m in batch)
    return offsets


def test_ranges_of_several_partitions_read_together_exactly_and_the_consumer_reads_on(stack, make_topic):
    topic = make_topic(3)
    produce(stack.bootstrap_servers, topic, [json.dumps({"i": i}).encode() for i in range(3_000)], 3)
    consumer = Consumer(consumer_config({"bootstrap.servers": stack.bootstrap_servers}, "test-reader"))
    try:
        # A partition whose range ends first (likely the short one) is paused while the others are read;
        # pausing must not outlive the read, or the same consumer would wait forever on its next range there.
        first = read_together(consumer, [(topic, 0, 0, 700), (topic, 1, 100, 110), (topic, 2, 5, 5)])
        second = read_together(consumer, [(topic, 1, 110, 1_000), (topic, 0, 700, 1_000)], stall_timeout_s=5)
    finally:
        consumer.close()

    assert first == [list(range(700)), list(range(100, 110)), []]
    assert second == [list(range(110, 1_000)), list(range(700, 1_000))]


def test_two_ranges_of_one_partition_are_refused(stack, make_topic):
    topic = make_topic(1)
    consumer = Consumer(consumer_config({"bootstrap.servers": stack.bootstrap_servers}, "test-reader"))
    try:
        with pytest.raises(ValueError, match="one range per partition"):
            next(read_ranges(consumer, [(topic, 0, 0, 5), (topic, 0, 5, 9)]))
    finally:
        consumer.close()


def test_a_stalled_range_read_with_others_fails_naming_its_partition(stack, make_topic):
    topic = make_topic(2)
    produce(stack.bootstrap_servers, topic, [json.dumps({"i": i}).encode() for i in range(20)], 2)
    consumer = Consumer(consumer_config({"bootstrap.servers": stack.bootstrap_servers}, "test-reader"))
    try:
        with pytest.raises(RangeNotReadableError, match=rf"{topic}\[1\]: expected records up to offset 15, "
                                                        "found none past 10"):
            read_together(consumer, [(topic, 0, 0, 10), (topic, 1, 0, 15)], stall_timeout_s=2)
    finally:
        consumer.close()


def test_with_failed_given_a_range_that_cannot_be_read_is_set_aside_and_the_others_are_read(stack, make_topic):
    """Tasks read together (the resident runners' batches) fail one at a time: a range past its partition's end
    and a range that stalls are recorded under their index while the other partitions are read to their ends.
    """
    topic, other = make_topic(2), make_topic(1)
    produce(stack.bootstrap_servers, topic, [json.dumps({"i": i}).encode() for i in range(20)], 2)
    produce(stack.bootstrap_servers, other, [json.dumps({"i": i}).encode() for i in range(500)], 1)
    consumer = Consumer(consumer_config({"bootstrap.servers": stack.bootstrap_servers}, "test-reader"))
    failed: dict[int, RangeNotReadableError] = {}
    offsets: list[list[int]] = [[], [], []]
    try:
        ranges = [(topic, 0, 50, 60), (other, 0, 0, 500), (topic, 1, 0, 15)]
        for i, batch in read_ranges(consumer, ranges, 2, failed):
            offsets[i].extend(m.offset() for m in batch)
        again = read_together(consumer, [(topic, 0, 0, 10), (topic, 1, 0, 10)])  # nothing stays paused
    finally:
        consumer.close()

    assert sorted(failed) == [0, 2]
    assert f"{topic}[1]: expected records up to offset 15, found none past 10" in str(failed[2])
    assert offsets[1] == list(range(500)) and offsets[2] == list(range(10))
    assert again == [list(range(10)), list(range(10))]


def test_given_highs_each_range_read_tells_how_far_its_partition_has_grown(stack, make_topic):
    topic = make_topic(2)
    produce(stack.bootstrap_servers, topic, [json.dumps({"i": i}).encode() for i in range(1_000)], 2)
    ranges = [(topic, 0, 300, 400), (topic, 1, 300, 400)]
    consumer = Consumer(consumer_config({"bootstrap.servers": stack.bootstrap_servers}, "test-reader"))
    highs: dict[int, int] = {}
    try:
        assert read_together(consumer, ranges, highs=highs) == [list(range(300, 400))] * 2
    finally:
        consumer.close()
    assert highs == {0: 500, 1: 500}  # the partitions' ends, as the fetch reported them
