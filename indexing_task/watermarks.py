"""The partitions a spec reads and their low/high watermarks (offset of the first record / next record).

The metadata clients are long-lived, one per set of consumer properties (:class:`_Clients`): each
supervisor asks every second or so, and a librdkafka client per call cost its threads, a broker
connection and a metadata round trip each time.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

import sqlalchemy as sa
from confluent_kafka import Consumer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient

from indexing_task.errors import IndexingError
from segment_store import Partition, TopicPartitionId, check_topic_ids, kafka_partition
from specs import KafkaIOConfigSpec

__all__ = ["TopicIdSource", "close_metadata_clients", "stream_topic_ids", "stream_watermarks", "topic_id_changes"]

C = TypeVar("C", Consumer, AdminClient)


class _Clients(Generic[C]):
    """Clients made by ``make(properties)``, kept per set of properties (the ``size`` most recently used).

    A client serves one call at a time. One whose call raised is closed and made again next time,
    so a spec with a wrong address keeps no client reconnecting in the background.
    """

    def __init__(self, make: Callable[[dict[str, Any]], C], size: int = 32) -> None:
        self._make: Callable[[dict[str, Any]], C] = make
        self._size = size
        self._clients: OrderedDict[str, tuple[C, threading.Lock]] = OrderedDict()
        self._lock = threading.Lock()

    @contextmanager
    def use(self, properties: Mapping[str, Any]) -> Iterator[C]:
        key = json.dumps(properties, sort_keys=True, default=str)
        while True:  # until holding a client that is still kept (not evicted or closed meanwhile)
            with self._lock:
                entry = self._clients.get(key)
                if entry is None:
                    entry = self._clients[key] = (self._make(dict(properties)), threading.Lock())
                self._clients.move_to_end(key)
                evicted = [self._clients.popitem(last=False)[1] for _ in range(len(self._clients) - self._size)]
            self._close_all(evicted)
            client, lock = entry
            lock.acquire()
            with self._lock:
                kept = self._clients.get(key) is entry
            if kept:
                break
            lock.release()
        try:
            yield client
        except BaseException:
            with self._lock:
                if self._clients.get(key) is entry:
                    del self._clients[key]
            _close(client)
            raise
        finally:
            lock.release()

    def close(self) -> None:
        """Close every client (the next call makes a new one)."""
        with self._lock:
            clients, self._clients = list(self._clients.values()), OrderedDict()
        self._close_all(clients)

    @staticmethod
    def _close_all(entries: list[tuple[C, threading.Lock]]) -> None:
        """Close clients that are no longer kept, each once its call in flight (if any) is done."""
        for client, lock in entries:
            with lock:
                _close(client)


def _close(client: Consumer | AdminClient) -> None:
    if isinstance(client, Consumer):
        client.close()  # an AdminClient has nothing to close: it goes with its last reference


_consumers: _Clients[Consumer] = _Clients(lambda properties: Consumer({
    "group.id": "overlord-metadata", "enable.auto.commit": False,
    "log_level": 2,  # an unreachable broker surfaces as the exception below, once
    **properties}))
_admins: _Clients[AdminClient] = _Clients(
    lambda properties: AdminClient({**properties, "log_level": 3}))  # consumer-only properties warn (level 4)


def close_metadata_clients() -> None:
    """Close the kept metadata clients: an overlord that stops leaves none reconnecting to its brokers."""
    _consumers.close()
    _admins.close()


def stream_watermarks(consumer_properties: Mapping[str, Any], io: KafkaIOConfigSpec,
                      timeout_s: float = 10.0) -> dict[Partition, tuple[int, int]]:
    """``{partition: (low, high)}`` of the spec's topic, or of every topic its ``topicPattern`` matches.

    A topic's partitions are numbers; a pattern's are :class:`TopicPartitionId`. An unknown
    topic raises :class:`IndexingError`; a pattern matching no topic yet has no partitions.
    """
    with _consumers.use(consumer_properties) as consumer:
        def marks(topic: str, partition: int) -> tuple[int, int]:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
            return int(low), int(high)

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


def stream_topic_ids(consumer_properties: Mapping[str, Any], topics: Iterable[str],
                     timeout_s: float = 10.0) -> dict[str, str]:
    """The broker's topic ID (KIP-516) of each topic that has one; brokers without topic IDs give none."""
    wanted = sorted(set(topics))
    if not wanted:
        return {}
    ids = {}
    with _admins.use(consumer_properties) as admin:
        found = admin.describe_topics(TopicCollection(wanted), request_timeout=timeout_s)
        for topic, future in found.items():
            topic_id = future.result(timeout=timeout_s).topic_id
            if topic_id is not None and (topic_id.get_most_significant_bits()
                                         or topic_id.get_least_significant_bits()):
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
