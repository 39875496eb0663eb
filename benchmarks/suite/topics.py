"""Benchmark topics on the broker: created with explicit configs, filled, and dropped after use."""

from __future__ import annotations

from collections.abc import Sequence

from confluent_kafka.admin import AdminClient

from indexing_task.watermarks import stream_watermarks
from overlord.dev import sample_data
from overlord.dev.sample_data import produce
from segment_store import Partition
from specs import KafkaIOConfigSpec

__all__ = ["create_topic", "delete_topics", "end_offsets", "produce"]

TOPIC_CONFIG = {"retention.ms": "-1", "retention.bytes": "-1"}
"""Quix Streams reads the input topic's configs and fails on a broker that returns none
(the embedded Tansu build returns none unless the topic was created with some)."""


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    sample_data.create_topic(bootstrap, topic, partitions, TOPIC_CONFIG)


def delete_topics(bootstrap: str, topics: Sequence[str]) -> None:
    """Drop topics to free the in-memory broker; a broker that cannot is left as it is."""
    if not topics:
        return
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics(list(topics), operation_timeout=10).values():
        try:
            future.result(timeout=15)
        except Exception:  # noqa: BLE001 - best effort: only memory is at stake
            pass


def end_offsets(bootstrap: str, topic: str) -> dict[Partition, int]:
    """The next offset of every partition (exact after :func:`produce`)."""
    marks = stream_watermarks({"bootstrap.servers": bootstrap}, KafkaIOConfigSpec(topic=topic))
    return {p: high for p, (_low, high) in marks.items()}

