"""The partitions a spec reads and their low/high watermarks (offset of the first record / next record)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import sqlalchemy as sa
from confluent_kafka import Consumer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient

from indexing_task.errors import IndexingError
from segment_store import Partition, TopicPartitionId, check_topic_ids, kafka_partition
from specs import KafkaIOConfigSpec

__all__ = ["TopicIdSource", "stream_topic_ids", "stream_watermarks", "topic_id_changes"]


def stream_watermarks(consumer_properties: Mapping[str, Any], io: KafkaIOConfigSpec,
                      timeout_s: float = 10.0) -> dict[Partition, tuple[int, int]]:
    """``{partition: (low, high)}`` of the spec's topic, or of every topic its ``topicPattern`` matches.

    A topic's partitions are numbers; a pattern's are :class:`TopicPartitionId`. An unknown
    topic raises :class:`IndexingError`; a pattern matching no topic yet has no partitions.
    """
    consumer = Consumer({"group.id": "overlord-metadata", "enable.auto.commit": False,
                         "log_level": 2,  # an unreachable broker surfaces as the exception below, once
                         **consumer_properties})

    def marks(topic: str, partition: int) -> tuple[int, int]:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
        return int(low), int(high)

    try:
        if io.topic is not None:
            metadata = consumer.list_topics(io.topic, timeout=timeout_s).topics.get(io.topic)
            if metadata is None or metadata.error is not None or not metadata.partitions:
                reason = metadata.error if metadata is not None else "no metadata"
                raise IndexingError(f"topic {io.topic!r} is not available: {reason}")
            return {p: marks(io.topic, p) for p in sorted(metadata.partitions)}
        topics = consumer.list_topics(timeout=timeout_s).topics
        return {TopicPartitionId(topic, p): marks(topic, p)
                for topic, metadata in sorted(topics.items()) if io.reads(topic) and metadata.error is None
                for p in sorted(metadata.partitions)}
    finally:
        consumer.close()


def stream_topic_ids(consumer_properties: Mapping[str, Any], topics: Iterable[str],
                     timeout_s: float = 10.0) -> dict[str, str]:
    """The broker's topic ID (KIP-516) of each topic that has one; brokers without topic IDs give none."""
    wanted = sorted(set(topics))
    if not wanted:
        return {}
    admin = AdminClient({**consumer_properties, "log_level": 3})  # consumer-only properties warn (level 4)
    found = admin.describe_topics(TopicCollection(wanted), request_timeout=timeout_s)
    ids = {}
    for topic, future in found.items():
        topic_id = future.result(timeout=timeout_s).topic_id
        if topic_id is not None and (topic_id.get_most_significant_bits() or topic_id.get_least_significant_bits()):
            ids[topic] = str(topic_id)
    return ids


TopicIdSource = Callable[[Mapping[str, Any], Iterable[str]], Mapping[str, str]]
"""``(consumer properties, topics) -> {topic: topic ID}``, for the topics the broker gives an ID."""


def topic_id_changes(engine: sa.Engine, datasource: str, consumer_properties: Mapping[str, Any], topic: str | None,
                     partitions: Iterable[Partition], topic_ids: TopicIdSource = stream_topic_ids,
                     ) -> dict[Partition, tuple[str, str]]:
    """The partitions whose topic has another ID now than the one recorded: ``{partition: (recorded, now)}``.

    ``topic`` is the spec's one topic (None for a ``topicPattern``). IDs seen for the first time
    are recorded (:func:`segment_store.check_topic_ids`).
    """
    topics = {p: kafka_partition(p, topic)[0] for p in partitions}
    if not topics:
        return {}
    ids = topic_ids(consumer_properties, set(topics.values()))
    return check_topic_ids(engine, datasource, {p: ids[t] for p, t in topics.items() if t in ids})
