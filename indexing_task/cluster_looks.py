"""One look at a Kafka cluster serves every supervisor and task that reads from it for a moment.

Each supervisor asks its topic's latest offsets when a task group is due, and each task asks its
topic's ID after its read: a hundred quiet topics make ~100 such looks a second, each a round trip
that costs the overlord's process ~0.5 ms (and as much again in librdkafka's threads) and the
broker a scan of the partition for each offset (Tansu's in-memory one). Here a look is shared:

- :class:`SharedWatermarks` describes every topic and reads the latest offsets of every partition
  asked for lately in one request each, at most once per ``max_age_s`` (0.25 s: what it adds to
  freshness at most). The earliest offsets are asked as :func:`stream_watermarks` does.
- :func:`shared_topic_ids` answers from a look that *started after* the caller's read began (the
  publish check needs the ID as of after the read, never older), asking once for every caller
  waiting.

Looks are per set of consumer properties (one cluster and its credentials). A partition not asked
for within ``_FORGET_S`` is left out of the next look.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from functools import partial
from typing import Any, Generic, TypeVar

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

_FORGET_S = 60.0
"""A key not asked for this long is left out of the next look."""


class _SharedLook(Generic[K, V]):
    """Values of keys, read by ``look(keys)`` for every key asked lately at once; one look at a time.

    :meth:`get` answers from the last look if it started at or after ``fresh_after`` (monotonic) and
    covered the keys; otherwise it looks (or waits for the look under way, then checks again).
    A key whose look raised is dropped and its caller gets the error; a look that raised as a
    whole raises to its caller, and the keys of others are asked again by them alone (a key that
    fails every look never holds the others back).
    """

    def __init__(self, look: Callable[[list[K]], dict[K, V | Exception]]) -> None:
        self._look = look
        self._lock = threading.Lock()
        self._looking = threading.Lock()
        self._values: dict[K, V] = {}
        self._asked: dict[K, float] = {}
        self._started = float("-inf")

    def get(self, keys: Iterable[K], fresh_after: float) -> dict[K, V]:
        wanted = list(dict.fromkeys(keys))
        now = time.monotonic()
        with self._lock:
            for key in wanted:
                self._asked[key] = now
            found = self._fresh(wanted, fresh_after)
        if found is not None:
            return found
        with self._looking:
            with self._lock:
                found = self._fresh(wanted, fresh_after)
                if found is not None:
                    return found
                asked = [k for k, at in self._asked.items() if now - at < _FORGET_S or k in wanted]
                self._asked = {k: self._asked[k] for k in asked}
            started = time.monotonic()
            try:
                answers = self._look(asked)
            except Exception:
                with self._lock:
                    self._asked = {k: at for k, at in self._asked.items() if k in wanted}
                raise
            with self._lock:
                self._started = started
                self._values = {k: v for k, v in answers.items() if not isinstance(v, Exception)}
                for key, answer in answers.items():
                    if isinstance(answer, Exception):
                        self._asked.pop(key, None)
                        if key in wanted:
                            raise answer
                return {k: self._values[k] for k in wanted if k in self._values}

    def _fresh(self, wanted: list[K], fresh_after: float) -> dict[K, V] | None:
        if self._started < fresh_after or any(k not in self._values for k in wanted):
            return None
        return {k: self._values[k] for k in wanted}


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
