"""The partitions a spec reads and their low/high watermarks (offset of the first record / next record).

The metadata clients are long-lived, one per set of consumer properties (:class:`_Clients`), and
shared by concurrent calls: each supervisor asks every second or so, and a librdkafka client per
call cost its threads, a broker connection and a metadata round trip each time. A call asks for
a topic's partitions, then for the latest offsets of all of them and the earliest of those whose
earliest the caller does not know, at once.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

import sqlalchemy as sa
from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from indexing_task.task_errors import IndexingError
from segment_store import Partition, TopicPartitionId, check_topic_ids, kafka_partition
from specs import KafkaIOConfigSpec

__all__ = ["TopicIdSource", "admins", "close_metadata_clients", "partition_topic_ids", "properties_key",
           "stream_partitions", "stream_topic_ids", "stream_watermarks", "topic_error", "topic_id", "topic_id_changes",
           "topic_partitions", "with_earliest"]

C = TypeVar("C")
T = TypeVar("T")


class _Clients(Generic[C]):
    """Clients made by ``make(properties)``, kept per set of properties (the ``size`` most recently used).

    Calls share a client (librdkafka's are thread-safe), so one supervisor's refresh never waits
    for another's round trips. One whose call raised is dropped and made again next time, so a
    spec with a wrong address keeps no client reconnecting in the background.
    """

    def __init__(self, make: Callable[[dict[str, Any]], C], size: int = 32) -> None:
        self._make: Callable[[dict[str, Any]], C] = make
        self._size = size
        self._clients: OrderedDict[str, C] = OrderedDict()
        self._lock = threading.Lock()

    @contextmanager
    def use(self, properties: Mapping[str, Any]) -> Iterator[C]:
        key = properties_key(properties)
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                client = self._clients[key] = self._make(dict(properties))
            self._clients.move_to_end(key)
            while len(self._clients) > self._size:
                self._clients.popitem(last=False)
        try:
            yield client
        except BaseException:
            with self._lock:
                if self._clients.get(key) is client:
                    del self._clients[key]
            raise

    def close(self) -> None:
        """Forget every client (one goes, with its threads and connections, with its last call)."""
        with self._lock:
            self._clients.clear()


def properties_key(properties: Mapping[str, Any]) -> str:
    """One set of consumer properties as a key: the clients (and shared looks) of equal ones are the same."""
    return json.dumps(properties, sort_keys=True, default=str)


admins: _Clients[AdminClient] = _Clients(lambda properties: AdminClient({
    **properties,
    "log_level": 2}))  # an unreachable broker surfaces as the call's error, once; consumer-only properties warn (4)

_GRACE_S = 5.0
"""How much longer than a request's own timeout a call waits for its answer: librdkafka's timeout then
comes back first, as a KafkaError that says what timed out (Python's own is a bare TimeoutError)."""


def _result(future: Future[T], timeout_s: float) -> T:
    return future.result(timeout=timeout_s + _GRACE_S)


def close_metadata_clients() -> None:
    """Close the kept metadata clients: an overlord that stops leaves none reconnecting to its brokers."""
    admins.close()


def stream_watermarks(consumer_properties: Mapping[str, Any], io: KafkaIOConfigSpec, timeout_s: float = 10.0, *,
                      known_lows: Mapping[Partition, int] | None = None) -> dict[Partition, tuple[int, int]]:
    """``{partition: (low, high)}`` of the spec's topic, or of every topic its ``topicPattern`` matches.

    A topic's partitions are numbers; a pattern's are :class:`TopicPartitionId`. An unknown
    topic raises :class:`IndexingError`; a pattern matching no topic yet has no partitions. The
    latest offsets are read-committed ones, as the reader reads. The lows of ``known_lows`` are
    taken from it, not asked: a broker may scan a partition for each offset asked (Tansu's
    in-memory one does), and the earliest moves only when retention deletes records.
    """
    partitions = stream_partitions(consumer_properties, io, timeout_s)
    if not partitions:
        return {}
    with admins.use(consumer_properties) as admin:
        return _marks(admin, partitions, timeout_s, known_lows or {})


def stream_partitions(consumer_properties: Mapping[str, Any], io: KafkaIOConfigSpec,
                      timeout_s: float = 10.0) -> dict[Partition, TopicPartition]:
    """The spec's partitions (:func:`stream_watermarks`' keys), each as the Kafka partition to ask about."""
    with admins.use(consumer_properties) as admin:
        if io.topic is None:
            topics = admin.list_topics(timeout=timeout_s).topics
            return {TopicPartitionId(topic, p): TopicPartition(topic, p)
                    for topic, metadata in sorted(topics.items()) if io.reads(topic) and metadata.error is None
                    for p in sorted(metadata.partitions)}
        try:
            described = admin.describe_topics(TopicCollection([io.topic]), request_timeout=timeout_s)
            found = topic_partitions(io.topic, _result(described[io.topic], timeout_s))
        except KafkaException as exc:
            raise topic_error(io.topic, exc) from None
        return {p: TopicPartition(io.topic, p) for p in found}


def topic_partitions(topic: str, description: Any) -> list[int]:
    """A described topic's partition numbers; :class:`IndexingError` if it has none."""
    if not description.partitions:
        raise IndexingError(f"topic {topic!r} is not available: it has no partitions")
    return sorted(p.id for p in description.partitions)


def topic_error(topic: str, exc: KafkaException) -> Exception:
    """What describing ``topic`` raising ``exc`` means.

    The topic is not there (:class:`IndexingError`), or librdkafka's own error (the broker unreachable, a
    timeout: not the topic's fault) as it is.
    """
    error: KafkaError = exc.args[0]
    if error.code() < 0 and error.code() != KafkaError._UNKNOWN_TOPIC:
        return exc
    return IndexingError(f"topic {topic!r} is not available: {error}")


def with_earliest(consumer_properties: Mapping[str, Any], partitions: Mapping[Partition, TopicPartition],
                  timeout_s: float, known_lows: Mapping[Partition, int]) -> dict[Partition, int]:
    """Each partition's earliest offset: from ``known_lows``, else asked (one request for those not known)."""
    unknown = {p: tp for p, tp in partitions.items() if p not in known_lows}
    if not unknown:
        return {p: known_lows[p] for p in partitions}
    with admins.use(consumer_properties) as admin:
        asked = admin.list_offsets({tp: OffsetSpec.earliest() for tp in unknown.values()},  # type: ignore[no-untyped-call]
                                   isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=timeout_s)
        return {p: known_lows[p] if p not in unknown else int(_result(asked[unknown[p]], timeout_s).offset)
                for p in partitions}


def _marks(admin: AdminClient, partitions: Mapping[Partition, TopicPartition], timeout_s: float,
           known_lows: Mapping[Partition, int]) -> dict[Partition, tuple[int, int]]:
    """Every partition's latest offset, and the earliest of those not in ``known_lows``.

    Two requests in flight together, or one if every earliest is known.
    """
    def ask(spec: Any, which: Iterable[TopicPartition]) -> dict[TopicPartition, Any]:
        asked = {tp: spec for tp in which}
        return admin.list_offsets(asked, isolation_level=IsolationLevel.READ_COMMITTED,
                                  request_timeout=timeout_s) if asked else {}

    unknown = [tp for p, tp in partitions.items() if p not in known_lows]
    low = ask(OffsetSpec.earliest(), unknown)  # type: ignore[no-untyped-call]
    high = ask(OffsetSpec.latest(), partitions.values())  # type: ignore[no-untyped-call]
    return {p: (known_lows[p] if tp not in low else int(_result(low[tp], timeout_s).offset),
                int(_result(high[tp], timeout_s).offset))
            for p, tp in partitions.items()}


def stream_topic_ids(consumer_properties: Mapping[str, Any], topics: Iterable[str],
                     timeout_s: float = 10.0) -> dict[str, str]:
    """The broker's topic ID (KIP-516) of each topic that has one; brokers without topic IDs give none."""
    wanted = sorted(set(topics))
    if not wanted:
        return {}
    ids = {}
    with admins.use(consumer_properties) as admin:
        found = admin.describe_topics(TopicCollection(wanted), request_timeout=timeout_s)
        for topic, future in found.items():
            if (found_id := topic_id(_result(future, timeout_s))) is not None:
                ids[topic] = found_id
    return ids


def topic_id(description: Any) -> str | None:
    """A described topic's ID (KIP-516); None from a broker without topic IDs (it gives all zeros)."""
    uuid = description.topic_id
    if uuid is None or not (uuid.get_most_significant_bits() or uuid.get_least_significant_bits()):
        return None
    return str(uuid)


TopicIdSource = Callable[[Mapping[str, Any], Iterable[str]], Mapping[str, str]]
"""``(consumer properties, topics) -> {topic: topic ID}``, for the topics the broker gives an ID."""


def partition_topic_ids(consumer_properties: Mapping[str, Any], topic: str | None, partitions: Iterable[Partition],
                        topic_ids: TopicIdSource = stream_topic_ids) -> dict[Partition, str]:
    """The broker's topic ID of each partition's topic (``topic``: the spec's one topic, None for a pattern)."""
    topics = {p: kafka_partition(p, topic)[0] for p in partitions}
    if not topics:
        return {}
    ids = topic_ids(consumer_properties, set(topics.values()))
    return {p: ids[t] for p, t in topics.items() if t in ids}


def topic_id_changes(engine: sa.Engine, datasource: str, consumer_properties: Mapping[str, Any], topic: str | None,
                     partitions: Iterable[Partition], topic_ids: TopicIdSource = stream_topic_ids,
                     ) -> dict[Partition, tuple[str, str]]:
    """The partitions whose topic has another ID now than the one recorded: ``{partition: (recorded, now)}``.

    ``topic`` is the spec's one topic (None for a ``topicPattern``). IDs seen for the first time
    are recorded (:func:`segment_store.check_topic_ids`).
    """
    current = partition_topic_ids(consumer_properties, topic, partitions, topic_ids)
    return check_topic_ids(engine, datasource, current) if current else {}
