"""The supervisor loop's metadata clients: kept per set of properties, shared by concurrent calls, and
exactly what a reader sees (the read-committed watermarks of a topic or of a pattern's topics).
"""

from __future__ import annotations

import re
import threading

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from indexing_task.task_errors import IndexingError
from indexing_task.watermarks import _Clients, stream_watermarks
from overlord.dev.sample_data import produce
from overlord.dev.stack import free_port
from segment_store import TopicPartitionId
from specs import KafkaIOConfigSpec


class Client:
    def __init__(self, properties: dict) -> None:
        self.properties = properties


def test_clients_are_kept_per_properties_and_evicted_least_recently_used_first() -> None:
    clients = _Clients(Client, size=2)

    def client(properties: dict) -> Client:
        with clients.use(properties) as used:
            return used

    first = client({"a": 1})
    assert client({"a": 1}) is first  # kept, not made again
    made = [client({"b": n}) for n in range(2)]
    assert client({"b": 0}) is made[0]
    assert client({"a": 1}) is not first  # the least recently used, past size 2
    with pytest.raises(ValueError), clients.use({"b": 2}) as failing:
        raise ValueError("broker unreachable")
    assert client({"b": 2}) is not failing  # a client whose call raised is made again


def test_concurrent_calls_share_a_client_without_waiting_for_each_other() -> None:
    """Twenty supervisors' refreshes queued on one client's lock: at 20 x 500 events/s a refresh took 0.5 s."""
    clients = _Clients(Client)
    in_call, release, answered = threading.Event(), threading.Event(), []

    def long_call() -> None:
        with clients.use({"a": 1}):
            in_call.set()
            release.wait(30)

    caller = threading.Thread(target=long_call)
    caller.start()
    assert in_call.wait(10)
    def second_call() -> None:
        with clients.use({"a": 1}) as client:
            answered.append(client)

    other = threading.Thread(target=second_call)
    other.start()
    other.join(5)
    answered_while_the_first_ran = bool(answered)
    release.set()
    caller.join(10)
    assert answered_while_the_first_ran, "a second call waited for the first"


def _reader_marks(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test", "isolation.level": "read_committed"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(partitions)}
    finally:
        consumer.close()


def test_watermarks_are_what_a_reader_sees_for_a_topic_and_a_pattern(stack, make_topic) -> None:
    topics = [make_topic(2), make_topic(3)]
    for n, topic in enumerate(topics):
        produce(stack.bootstrap_servers, topic, [b'{"n": 1}'] * (50 + n), 2 + n)
    properties = {"bootstrap.servers": stack.bootstrap_servers}
    expected = _reader_marks(stack.bootstrap_servers, topics[0], 2)
    assert stream_watermarks(properties, KafkaIOConfigSpec(topic=topics[0])) == expected
    assert sum(high for _, high in expected.values()) > 0

    pattern = "|".join(map(re.escape, topics))
    marks = stream_watermarks(properties, KafkaIOConfigSpec(topicPattern=pattern))
    assert marks == {TopicPartitionId(topic, p): mark for n, topic in enumerate(topics)
                     for p, mark in _reader_marks(stack.bootstrap_servers, topic, 2 + n).items()}


def test_earliest_offsets_the_caller_knows_are_not_asked_for(stack, make_topic) -> None:
    topic = make_topic(2)
    produce(stack.bootstrap_servers, topic, [b'{"n": 1}'] * 40, 2)
    properties = {"bootstrap.servers": stack.bootstrap_servers}
    (low0, high0), (low1, high1) = _reader_marks(stack.bootstrap_servers, topic, 2).values()
    io = KafkaIOConfigSpec(topic=topic)
    assert stream_watermarks(properties, io, known_lows={0: 7}) == {0: (7, high0), 1: (low1, high1)}
    assert stream_watermarks(properties, io, known_lows={0: 7, 1: 9}) == {0: (7, high0), 1: (9, high1)}
    assert stream_watermarks(properties, io) == {0: (low0, high0), 1: (low1, high1)}


def test_an_unknown_topic_is_an_error_naming_it_and_is_not_created(stack) -> None:
    properties = {"bootstrap.servers": stack.bootstrap_servers}
    with pytest.raises(IndexingError, match="topic 'no-such-topic' is not available"):
        stream_watermarks(properties, KafkaIOConfigSpec(topic="no-such-topic"))
    listed = AdminClient(properties).list_topics(timeout=10).topics
    assert "no-such-topic" not in listed


def test_an_unreachable_broker_is_a_kafka_error_not_a_missing_topic() -> None:
    """The sampler answers a missing topic with a 400 naming the spec's topic; a broker that is down is not the
    spec's fault (and a bare TimeoutError named neither).
    """
    properties = {"bootstrap.servers": f"127.0.0.1:{free_port()}"}
    with pytest.raises(KafkaException) as raised:
        stream_watermarks(properties, KafkaIOConfigSpec(topic="events"), timeout_s=1.0)
    assert not isinstance(raised.value, IndexingError)
