"""Shared looks at a Kafka cluster (:mod:`indexing_task.cluster_looks`) on the real broker: one request serves
every caller for a moment, answers are what a reader sees, and a topic that fails never holds the others back.
"""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka.admin import AdminClient

from indexing_task import cluster_looks
from indexing_task.cluster_looks import SharedWatermarks, _SharedLook, shared_topic_ids
from indexing_task.task_errors import IndexingError
from indexing_task.watermarks import stream_topic_ids, stream_watermarks
from overlord.dev.sample_data import produce
from specs import KafkaIOConfigSpec


def counted(look: _SharedLook) -> list[list]:
    """Every key list ``look`` asks the broker about, as it asks."""
    asked: list[list] = []
    ask = look._look

    def counting(keys):
        asked.append(sorted(keys))
        return ask(keys)

    look._look = counting
    return asked


def test_one_look_serves_every_supervisor_for_its_max_age(stack, make_topic) -> None:
    properties = {"bootstrap.servers": stack.bootstrap_servers}
    a, b = make_topic(2), make_topic(1)
    produce(stack.bootstrap_servers, a, [b'{"n": 1}'] * 30, 2)
    produce(stack.bootstrap_servers, b, [b'{"n": 1}'] * 5, 1)
    marks = SharedWatermarks(max_age_s=30.0)
    asked = counted(marks._latest.of(properties))
    described = counted(marks._partitions.of(properties))
    assert marks(properties, KafkaIOConfigSpec(topic=a)) == stream_watermarks(properties, KafkaIOConfigSpec(topic=a))
    assert marks(properties, KafkaIOConfigSpec(topic=b)) == stream_watermarks(properties, KafkaIOConfigSpec(topic=b))
    assert asked == [[(a, 0), (a, 1)], [(b, 0)]]  # only what a caller waits for
    produce(stack.bootstrap_servers, a, [b'{"n": 1}'] * 10, 2)
    stale = marks(properties, KafkaIOConfigSpec(topic=a))
    assert len(asked) == 2 and sum(h for _, h in stale.values()) == 30  # within its max age: the look before
    assert described == [[a], [b]]
    marks.max_age_s = 0.0
    assert sum(h for _, h in marks(properties, KafkaIOConfigSpec(topic=a)).values()) == 40
    assert asked[-1] == [(a, 0), (a, 1)]


def test_callers_waiting_for_a_look_are_answered_by_one_request_started_after_them(stack, make_topic) -> None:
    """The publish check needs each topic's ID as of after its task's read: never from a look begun before it."""
    properties = {"bootstrap.servers": stack.bootstrap_servers}
    topics = [make_topic(1) for _ in range(6)]
    look = cluster_looks._topic_ids.of(properties)
    asked = counted(look)
    answers: dict[str, dict[str, str]] = {}
    with look._looking:  # a look under way: the callers queue behind it
        read_ended = time.monotonic()
        callers = [threading.Thread(target=lambda t=t: answers.update({t: shared_topic_ids(
            properties, [t], looked_after=read_ended)})) for t in topics]
        for caller in callers:
            caller.start()
        deadline = time.monotonic() + 10
        while not set(topics) <= look._waiting.keys() and time.monotonic() < deadline:
            time.sleep(0.01)
    for caller in callers:
        caller.join(10)
    assert answers == {t: stream_topic_ids(properties, [t]) for t in topics}
    assert asked == [sorted(topics)]  # one request for the six
    assert all(answers[t] for t in topics)  # Tansu gives topics IDs: the check is real


def test_a_deleted_topic_fails_its_own_callers_only(stack, make_topic) -> None:
    properties = {"bootstrap.servers": stack.bootstrap_servers}
    kept, deleted = make_topic(1), make_topic(1)
    marks = SharedWatermarks(max_age_s=0.0)
    for topic in (kept, deleted):
        marks(properties, KafkaIOConfigSpec(topic=topic))  # both partitions in every look from now on
    shared_topic_ids(properties, [kept, deleted], looked_after=time.monotonic())
    admin = AdminClient(properties)
    admin.delete_topics([deleted])[deleted].result(10)
    deadline = time.monotonic() + 10
    while deleted in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.1)
    with pytest.raises(IndexingError, match=f"topic '{deleted}' is not available"):
        marks(properties, KafkaIOConfigSpec(topic=deleted))
    assert marks(properties, KafkaIOConfigSpec(topic=kept)) == stream_watermarks(
        properties, KafkaIOConfigSpec(topic=kept))
    with pytest.raises(IndexingError, match=f"topic '{deleted}' is not available"):
        shared_topic_ids(properties, [deleted], looked_after=time.monotonic())
    assert shared_topic_ids(properties, [kept], looked_after=time.monotonic()) == stream_topic_ids(properties, [kept])
