"""Read exactly one partition's ``[start, end)`` from Kafka with confluent-kafka.

The reader uses ``assign`` + an explicit start offset (no consumer group, no commits) and
is finished when its position reaches ``end``: the position is the offset after the last
record seen, or the high watermark reported by a partition-EOF event. It never counts
records, because transaction markers and compacted topics leave gaps in the offsets.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterator, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from indexing_task.errors import RangeNotReadableError
from specs import EXACT_READ_CONSUMER_PROPERTIES, resolve_consumer_properties

__all__ = ["consumer_config", "read_range", "resolved_consumer_properties"]

_POLL_BATCH = 10_000
_POLL_TIMEOUT_S = 0.5


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
    """Yield batches of the data messages with offsets in ``[start, end)``, in order.

    Raises :class:`RangeNotReadableError` when the broker reports an error for the partition,
    or when no progress is made for ``stall_timeout_s`` before the position reaches ``end``.
    """
    if start >= end:
        return
    consumer.assign([TopicPartition(topic, partition, start)])
    position = start
    last_progress = time.monotonic()
    try:
        while position < end:
            # Ask for no more than the range can still hold: consume() waits for the full count or
            # the timeout, so a bigger count would idle for the whole timeout at the end of every
            # range that ends where the partition does (gaps only make the call return sooner,
            # with the partition-EOF event).
            messages = consumer.consume(min(_POLL_BATCH, end - position), _POLL_TIMEOUT_S)
            data = [m for m in messages if m.error() is None]
            if len(data) != len(messages):
                position = max(position, _check_events(messages, topic, partition, position))
            if data:
                cut = _first_at_or_after(data, end) if _offset(data[-1]) >= end else len(data)
                if cut < len(data):
                    data = data[:cut]
                    position = end
                else:
                    position = max(position, _offset(data[-1]) + 1)
                if data:
                    yield data
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > stall_timeout_s:
                raise RangeNotReadableError(
                    f"{topic}[{partition}]: expected records up to offset {end}, "
                    f"found none past {position} after {stall_timeout_s:.0f}s")
    finally:
        consumer.unassign()


_FAIL_FAST = {
    KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE, KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC, KafkaError.TOPIC_AUTHORIZATION_FAILED,
}


def _check_events(messages: list[Message], topic: str, partition: int, position: int) -> int:
    """Handle the error events of a batch; return the position a partition EOF proves.

    Transient errors (broker restarts, timeouts) are left to the client's own retries and,
    if they last, to the caller's stall timeout.
    """
    for message in messages:
        error = message.error()
        if error is None:
            continue
        if error.code() == KafkaError._PARTITION_EOF:
            # EOF carries the high watermark: every offset below it was delivered or is a gap.
            position = max(position, _offset(message))
            continue
        if error.fatal() or error.code() in _FAIL_FAST:
            raise RangeNotReadableError(
                f"{topic}[{partition}] at offset {position}: {error.str()}") from KafkaException(error)
    return position
