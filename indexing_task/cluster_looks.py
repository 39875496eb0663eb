"""One look at a Kafka cluster serves every supervisor and task that reads from it for a moment.

Each supervisor asks its topic's latest offsets when a task group is due, and each task asks its
topic's ID after its read: a hundred quiet topics make ~100 such looks a second, each a round trip
that costs the overlord's process ~0.5 ms (and as much again in librdkafka's threads) and the
broker a scan of the partition for each offset (Tansu's in-memory one). Here a look is shared:

- :class:`SharedWatermarks` answers from a look at most ``max_age_s`` old (0.25 s: what it may add to
  freshness); the supervisors waiting for a look meanwhile go in one describe and one offsets request.
  The earliest offsets are asked as :func:`stream_watermarks` does.
- :func:`shared_topic_ids` answers from a look begun after the caller's read ended (the publish
  check needs the ID as of after the read, never older), asking once for every caller waiting.

Looks are per set of consumer properties (one cluster and its credentials), and ask only for what
callers wait for: a broker may scan a partition for each offset asked.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from functools import partial
from typing import Any, Generic, TypeVar, cast

from confluent_kafka import IsolationLevel, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

from indexing_task.task_errors import IndexingError
from indexing_task.watermarks import (
    admins,
    properties_key,
    stream_partitions,
    topic_error,
    topic_id,
    topic_partitions,
    with_earliest,
)
from segment_store import Partition
from specs import KafkaIOConfigSpec

__all__ = ["SharedWatermarks", "shared_topic_ids"]

K = TypeVar("K")
V = TypeVar("V")

_KEEP_S = 60.0
"""How long an answer is kept (a key no caller asks for again is forgotten after that)."""


class _SharedLook(Generic[K, V]):
    """Values of keys, read by ``look(keys)``: one look at a time, for the keys of every caller waiting for it.

    :meth:`get` answers from looks begun at or after ``fresh_after`` (monotonic); otherwise it waits for
    its turn and looks for itself and for every caller that came meanwhile. A key's error goes to the
    callers of that key only; a look that raised as a whole raises to its caller, and the others waiting
    look again by themselves (a key that breaks every look never holds the others back).
    """

    def __init__(self, look: Callable[[list[K]], dict[K, V | Exception]]) -> None:
        self._look = look
        self._lock = threading.Lock()
        self._looking = threading.Lock()
        self._answers: dict[K, tuple[float, V | Exception]] = {}
        self._waiting: Counter[K] = Counter()

    def get(self, keys: Iterable[K], fresh_after: float) -> dict[K, V]:
        wanted = list(dict.fromkeys(keys))
        with self._lock:
            found = self._fresh(wanted, fresh_after)
            if found is not None:
                return self._values(found)
            self._waiting.update(wanted)
        try:
            with self._looking:
                with self._lock:
                    found = self._fresh(wanted, fresh_after)
                    asked = list(self._waiting)
                if found is None:
                    found = self._look_now(asked, wanted)
        finally:
            with self._lock:
                self._waiting.subtract(wanted)
                self._waiting = +self._waiting
        return self._values(found)

    def _look_now(self, asked: list[K], wanted: list[K]) -> dict[K, V | Exception]:
        started = time.monotonic()
        try:
            answers = self._look(asked)
        except Exception as exc:
            answers = dict.fromkeys(wanted, exc)
        with self._lock:
            self._answers = {k: answer for k, answer in self._answers.items() if answer[0] > started - _KEEP_S}
            self._answers.update((k, (started, answer)) for k, answer in answers.items())
            return {k: answers.get(k, LookupError(f"the look did not answer for {k}")) for k in wanted}

    def _fresh(self, wanted: list[K], fresh_after: float) -> dict[K, V | Exception] | None:
        answers = [self._answers.get(k) for k in wanted]
        if any(a is None or a[0] < fresh_after for a in answers):
            return None
        return {k: a[1] for k, a in zip(wanted, answers, strict=True) if a is not None}

    @staticmethod
    def _values(found: dict[K, V | Exception]) -> dict[K, V]:
        for value in found.values():
            if isinstance(value, Exception):
                raise value
        return cast(dict[K, V], found)


class _Looks(Generic[K, V]):
    """One :class:`_SharedLook` per set of consumer properties, made by ``make(properties)``."""

    def __init__(self, make: Callable[[dict[str, Any]], _SharedLook[K, V]]) -> None:
        self._make = make
        self._looks: dict[str, _SharedLook[K, V]] = {}
        self._lock = threading.Lock()

    def of(self, properties: Mapping[str, Any]) -> _SharedLook[K, V]:
        key = properties_key(properties)
        with self._lock:
            look = self._looks.get(key)
            if look is None:
                look = self._looks[key] = self._make(dict(properties))
            return look


def _latest_offsets(properties: dict[str, Any], timeout_s: float = 10.0
                    ) -> Callable[[list[tuple[str, int]]], dict[tuple[str, int], int | Exception]]:
    def look(keys: list[tuple[str, int]]) -> dict[tuple[str, int], int | Exception]:
        with admins.use(properties) as admin:
            asked = {TopicPartition(t, p): OffsetSpec.latest() for t, p in keys}  # type: ignore[no-untyped-call]
            futures = admin.list_offsets(asked, isolation_level=IsolationLevel.READ_COMMITTED,
                                         request_timeout=timeout_s)
            return {(tp.topic, tp.partition): _answer(future, timeout_s, lambda found: int(found.offset))
                    for tp, future in futures.items()}
    return look


def _described(properties: dict[str, Any], what: Callable[[str, Any], V], timeout_s: float = 10.0
               ) -> Callable[[list[str]], dict[str, V | Exception]]:
    """A look that describes topics: ``what(topic, description)`` of each, or the error it raised."""
    def look(topics: list[str]) -> dict[str, V | Exception]:
        with admins.use(properties) as admin:
            futures = admin.describe_topics(TopicCollection(topics), request_timeout=timeout_s)
            return {topic: _answer(future, timeout_s, partial(what, topic), topic)
                    for topic, future in futures.items()}
    return look


def _answer(future: Future[Any], timeout_s: float, value: Callable[[Any], V], topic: str | None = None,
            ) -> V | Exception:
    try:
        return value(future.result(timeout=timeout_s + 5))
    except KafkaException as exc:
        return exc if topic is None else topic_error(topic, exc)
    except IndexingError as exc:
        return exc


class SharedWatermarks:
    """A supervisor's watermark source that shares looks (:func:`indexing_task.watermarks.stream_watermarks`'s call).

    A spec's partitions and their latest offsets are at most ``max_age_s`` old. A ``topicPattern``'s
    topics are listed as :func:`stream_watermarks` lists them.
    """

    def __init__(self, max_age_s: float = 0.25) -> None:
        self.max_age_s = max_age_s
        self._latest: _Looks[tuple[str, int], int] = _Looks(lambda p: _SharedLook(_latest_offsets(p)))
        self._partitions: _Looks[str, list[int]] = _Looks(lambda p: _SharedLook(_described(p, topic_partitions)))

    def __call__(self, consumer_properties: Mapping[str, Any], io: KafkaIOConfigSpec, timeout_s: float = 10.0, *,
                 known_lows: Mapping[Partition, int] | None = None) -> dict[Partition, tuple[int, int]]:
        fresh_after = time.monotonic() - self.max_age_s
        partitions: dict[Partition, TopicPartition]
        if io.topic is None:
            partitions = stream_partitions(consumer_properties, io, timeout_s)
        else:
            numbers = self._partitions.of(consumer_properties).get([io.topic], fresh_after)[io.topic]
            partitions = {p: TopicPartition(io.topic, p) for p in numbers}
        if not partitions:
            return {}
        highs = self._latest.of(consumer_properties).get(
            ((tp.topic, tp.partition) for tp in partitions.values()), fresh_after)
        lows = with_earliest(consumer_properties, partitions, timeout_s, known_lows or {})
        return {p: (lows[p], highs[tp.topic, tp.partition]) for p, tp in partitions.items()}


_topic_ids: _Looks[str, str | None] = _Looks(
    lambda p: _SharedLook(_described(p, lambda _topic, found: topic_id(found))))


def shared_topic_ids(consumer_properties: Mapping[str, Any], topics: Iterable[str], *,
                     looked_after: float) -> dict[str, str]:
    """The broker's topic ID of each topic that has one, from a look started at or after ``looked_after`` (monotonic).

    The looks of callers waiting together are one request.
    """
    ids = _topic_ids.of(consumer_properties).get(topics, looked_after)
    return {topic: topic_id for topic, topic_id in ids.items() if topic_id is not None}
