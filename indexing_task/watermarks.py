"""The partitions of a topic and their low/high watermarks (offset of the first record / next record)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from indexing_task.errors import IndexingError

__all__ = ["topic_watermarks"]


def topic_watermarks(consumer_properties: Mapping[str, Any], topic: str,
                     timeout_s: float = 10.0) -> dict[int, tuple[int, int]]:
    """Return ``{partition: (low, high)}``; raise :class:`IndexingError` if the topic is unknown."""
    consumer = Consumer({"group.id": "overlord-metadata", "enable.auto.commit": False,
                         "log_level": 2,  # an unreachable broker surfaces as the exception below, once
                         **consumer_properties})
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            reason = metadata.error if metadata is not None else "no metadata"
            raise IndexingError(f"topic {topic!r} is not available: {reason}")
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
                for p in sorted(metadata.partitions)}
    finally:
        consumer.close()
