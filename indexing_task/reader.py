"""Read exactly the records of partition ranges ``[start, end)`` from Kafka with confluent-kafka.

The reader uses ``assign`` + explicit start offsets (no consumer group, no commits) and
is finished with a range when its position reaches ``end``: the position is the offset after the last
record seen, or the high watermark reported by a partition-EOF event. It never counts
records, because transaction markers and compacted topics leave gaps in the offsets.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from indexing_task.task_errors import RangeNotReadableError
from specs import EXACT_READ_CONSUMER_PROPERTIES, resolve_consumer_properties

__all__ = ["consumer_config", "read_range", "read_ranges", "resolved_consumer_properties"]

_POLL_BATCH = 10_000
_POLL_TIMEOUT_S = 0.5
_TO_THE_END_POLL_S = 0.02
"""How long one consume waits while ranges read to the end are unfinished: it returns only with the count
asked for or at its timeout, and how many records are there is not known (each wait would be whole)."""


def resolved_consumer_properties(properties: Mapping[str, Any]) -> dict[str, Any]:
    """A spec's consumerProperties, checked again, with Druid's dynamic config provider replaced by its values.

    Every property a spec gives librdkafka passes here, so a spec stored by an older version that
    holds a key refused now never reaches it. Anything off the allow-list, a provider
    variable that is not set, or one whose value is not valid for its property is a
    :class:`SpecError` naming its path (:func:`specs.resolve_consumer_properties`).
    """
    return resolve_consumer_properties(properties)


def consumer_config(consumer_properties: Mapping[str, Any], group_id: str) -> dict[str, Any]:
    """Return the librdkafka settings for an exact range read.

    Fetch tuning defaults first, then the spec's consumerProperties, then the settings the exact
    read depends on (:data:`specs.EXACT_READ_CONSUMER_PROPERTIES`), which nothing can override.
    """
    return {
        "group.id": group_id,  # required by the client; never joined or committed to
        "fetch.wait.max.ms": 50,
        "queued.min.messages": 200_000,
        "fetch.max.bytes": 64 * 1024 * 1024,
        "max.partition.fetch.bytes": 16 * 1024 * 1024,
        **consumer_properties,
        **EXACT_READ_CONSUMER_PROPERTIES,
    }


def _first_at_or_after(messages: list[Message], end: int) -> int:
    """Index of the first message whose offset is >= end (offsets rise within a partition)."""
    return bisect.bisect_left(messages, end, key=_offset)


def _offset(message: Message) -> int:
    """Return the offset of a data message or EOF event (always set for those)."""
    offset = message.offset()
    if offset is None:
        raise RangeNotReadableError(f"message without an offset from {message.topic()}")
    return offset


def read_range(consumer: Consumer, topic: str, partition: int, start: int, end: int,
               stall_timeout_s: float = 30.0) -> Iterator[list[Message]]:
    """Yield batches of the data messages with offsets in ``[start, end)``, in order (:func:`read_ranges`)."""
    for _, batch in read_ranges(consumer, [(topic, partition, start, end)], stall_timeout_s):
        yield batch


def read_ranges(consumer: Consumer, ranges: Sequence[tuple[str, int, int, int]], stall_timeout_s: float = 30.0,
                failed: dict[int, RangeNotReadableError] | None = None, highs: dict[int, int] | None = None,
                ends: dict[int, int] | None = None) -> Iterator[tuple[int, list[Message]]]:
    """Yield ``(i, batch)``: batches of the data messages of ``ranges[i]``, a ``(topic, partition, start, end)``.

    The ranges, each of a different partition, are read together: one fetch serves them all
    (read one after the other, each waited out the broker's ``fetch.wait.max.ms`` on the one
    before). A range's batches come in offset order; different ranges' interleave. A partition is
    paused once its range is read. A range is not readable when the broker reports an error for
    its partition, or when it makes no progress for ``stall_timeout_s``: that raises
    :class:`RangeNotReadableError`, or, given ``failed``, puts the error there under the range's
    index and reads on (the ranges of other tasks read with it are not held up). Given ``highs``,
    each range read to its end gets its partition's high watermark there, as the last fetch
    reported it (no round trip: how far the partition has grown meanwhile). The ranges whose indexes
    are keys of ``ends`` end where their partitions do when the read gets there (the high watermark of
    the fetch response that brought their records, or a partition-EOF event), or at their ``end`` if
    sooner: their values in ``ends`` become those offsets.
    """
    index = _index_ranges(ranges)
    position = {key: ranges[i][2] for key, i in index.items()}
    if not position:
        return
    consumer.assign([TopicPartition(topic, partition, at) for (topic, partition), at in position.items()])
    reads = _RangeReads(consumer, ranges, index, position, stall_timeout_s, failed, highs, ends)
    try:
        while position:
            messages = consumer.consume(reads.batch_size(), _TO_THE_END_POLL_S if ends else _POLL_TIMEOUT_S)
            now = time.monotonic()
            for key, group in _by_partition(messages, next(iter(position)) if len(index) == 1 else None):
                yield from reads.take(key, group, now)
            reads.finish_stalled(now)
    finally:
        reads.release()


def _index_ranges(ranges: Sequence[tuple[str, int, int, int]]) -> dict[tuple[str, int], int]:
    """Each partition's index in ``ranges``, for the ranges not empty; ValueError if a partition has two."""
    index = {(topic, partition): i for i, (topic, partition, start, end) in enumerate(ranges) if start < end}
    if len({(topic, partition) for topic, partition, _, _ in ranges}) != len(ranges):
        raise ValueError("read_ranges reads one range per partition")
    return index


class _RangeReads:
    """The state of one :func:`read_ranges`: each unfinished range's position and when it last moved on."""

    __slots__ = ("consumer", "ends", "failed", "highs", "index", "paused", "position", "progress", "ranges",
                 "stall_timeout_s")

    def __init__(self, consumer: Consumer, ranges: Sequence[tuple[str, int, int, int]],
                 index: dict[tuple[str, int], int], position: dict[tuple[str, int], int], stall_timeout_s: float,
                 failed: dict[int, RangeNotReadableError] | None, highs: dict[int, int] | None,
                 ends: dict[int, int] | None = None) -> None:
        self.consumer, self.ranges, self.index, self.position = consumer, ranges, index, position
        self.stall_timeout_s, self.failed, self.highs, self.ends = stall_timeout_s, failed, highs, ends
        self.progress = dict.fromkeys(position, time.monotonic())
        self.paused: list[TopicPartition] = []

    def batch_size(self) -> int:
        """How many messages to ask for: no more than the unfinished ranges can still hold."""
        # consume() waits for the full count or the timeout, so a bigger count would idle for the whole
        # timeout at the end of every range that ends where the partition does (gaps only make the call
        # return sooner, with the partition-EOF event).
        return min(_POLL_BATCH, sum(self.ranges[self.index[key]][3] - at for key, at in self.position.items()))

    def take(self, key: tuple[str | None, int | None], group: list[Message], now: float,
             ) -> Iterator[tuple[int, list[Message]]]:
        """Yield what one partition's messages of a fetch hold of its range, then move the range's position on."""
        position = self.position
        if key not in position:
            if key not in self.index:  # an error for no partition of ours (a fatal one raises)
                _check_events(group, str(key[0]), -1, -1)
            return  # a range already read: what its prefetch brought is past its end
        topic, partition = key
        at, end = position[key], self.ranges[self.index[key]][3]
        data = [m for m in group if m.error() is None]
        to_the_end = self.ends is not None and self.index[key] in self.ends
        at_eof = False
        if len(data) != len(group):
            try:
                eof = _check_events(group, topic, partition, at)
            except RangeNotReadableError as exc:
                self.finish(key, exc)
                return
            at_eof, at = eof > -1, max(at, eof)
        if data:
            cut = _first_at_or_after(data, end) if _offset(data[-1]) >= end else len(data)
            at = end if cut < len(data) else max(at, _offset(data[-1]) + 1)
            if cut:
                yield self.index[key], data[:cut] if cut < len(data) else data
        if at > position[key]:
            self.progress[key] = now
        position[key] = at
        if at >= end or (to_the_end and (at_eof or at >= self._high(key))):
            self.finish(key)

    def _high(self, key: tuple[str, int]) -> float:
        """The partition's high watermark as the last fetch response gave it (no round trip); inf if none yet.

        A range read to the end is done once its position is there: its records came with that response,
        and waiting for the partition-EOF event would cost another fetch (the broker holds an empty one).
        """
        _, high = self.consumer.get_watermark_offsets(TopicPartition(*key), cached=True)
        return high if high >= 0 else float("inf")

    def finish_stalled(self, now: float) -> None:
        """Finish, as not readable, each range that made no progress for ``stall_timeout_s``."""
        for (topic, partition), at in list(self.position.items()):
            if now - self.progress[topic, partition] > self.stall_timeout_s:
                end = self.ranges[self.index[topic, partition]][3]
                self.finish((topic, partition), RangeNotReadableError(
                    f"{topic}[{partition}]: expected records up to offset {end}, "
                    f"found none past {at} after {self.stall_timeout_s:.0f}s"))

    def finish(self, key: tuple[str, int], error: RangeNotReadableError | None = None) -> None:
        """Done with a range: raise its error (or put it in ``failed``) or note its high watermark; pause it."""
        if error is not None:
            if self.failed is None:
                raise error
            self.failed[self.index[key]] = error
        else:
            if self.ends is not None and self.index[key] in self.ends:
                self.ends[self.index[key]] = min(self.position[key], self.ranges[self.index[key]][3])
            if self.highs is not None:
                _, high = self.consumer.get_watermark_offsets(TopicPartition(*key), cached=True)
                if high >= 0:
                    self.highs[self.index[key]] = high
        del self.position[key]
        if self.position:
            self.paused.append(TopicPartition(*key))
            self.consumer.pause(self.paused[-1:])

    def release(self) -> None:
        """Resume the paused partitions and unassign them all."""
        if self.paused:  # a partition stays paused past unassign: assigned again, it would read nothing
            self.consumer.resume(self.paused)
        self.consumer.unassign()


def _by_partition(messages: list[Message], only: tuple[str, int] | None
                  ) -> Iterable[tuple[tuple[str | None, int | None], list[Message]]]:
    """The messages (and events) of each partition, in order; all of them if ``only`` is the one partition read."""
    if only is not None:
        return [(only, messages)] if messages else []
    groups: dict[tuple[str | None, int | None], list[Message]] = {}
    for message in messages:
        groups.setdefault((message.topic(), message.partition()), []).append(message)
    return groups.items()


_FAIL_FAST = {
    KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE, KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC, KafkaError.TOPIC_AUTHORIZATION_FAILED,
}


def _check_events(messages: list[Message], topic: str, partition: int, position: int) -> int:
    """Handle the error events of a batch; return the position a partition EOF proves (-1 if none came).

    Transient errors (broker restarts, timeouts) are left to the client's own retries and,
    if they last, to the caller's stall timeout.
    """
    eof = -1
    for message in messages:
        error = message.error()
        if error is None:
            continue
        if error.code() == KafkaError._PARTITION_EOF:
            # EOF carries the high watermark: every offset below it was delivered or is a gap.
            eof = max(position, _offset(message))
            continue
        if error.fatal() or error.code() in _FAIL_FAST:
            raise RangeNotReadableError(
                f"{topic}[{partition}] at offset {position}: {error.str()}") from KafkaException(error)
    return eof
