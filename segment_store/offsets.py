"""Kafka offsets as values: a frozen partition -> offset map and an offset range.

An offset is always **the next record to read**: a partition whose offset is 100 has had
records 0..99 read (or skipped), and record 100 comes next. A range ``[start, end)`` covers
the records from ``start`` up to, not including, ``end``; ``end`` is where the next range
starts. Offsets are never "the last record read".

A partition is a number of the datasource's one topic, or, for a datasource reading several
topics (``topicPattern``), a :class:`TopicPartitionId`. Stored and sent as JSON objects with
string keys, ``{"0": 100}`` or ``{"clicks:0": 100}`` (Druid's form); :meth:`Offsets.to_json`
and :meth:`Offsets.from_json` are the only encoding.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

__all__ = ["OffsetRange", "Offsets", "Partition", "TopicPartitionId", "kafka_partition"]


class TopicPartitionId(NamedTuple):
    """A partition of one of the topics a ``topicPattern`` matches; its text is ``"topic:partition"``.

    Kafka topic names cannot hold ``:``, so the text is unambiguous.
    """

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}:{self.partition}"


Partition = int | TopicPartitionId
"""A partition of the one topic, or of one of several topics."""


def kafka_partition(partition: Partition, topic: str | None) -> tuple[str, int]:
    """The Kafka topic and partition number to read: a bare number is a partition of ``topic``."""
    if isinstance(partition, TopicPartitionId):
        return partition.topic, partition.partition
    if topic is None:
        raise ValueError(f"partition {partition} names no topic")
    return topic, partition


class Offsets(Mapping[Partition, int]):
    """A frozen map partition -> offset (the next record to read), sorted by partition.

    Built from any mapping whose values are non-negative integers and whose keys are
    partitions of one kind: numbers or :class:`TopicPartitionId` (or their stored text,
    ``"0"`` or ``"clicks:0"``); anything else raises ``ValueError`` naming the partition.
    """

    __slots__ = ("_items", "_hash")

    def __init__(self, offsets: Mapping[Any, Any] | None = None) -> None:
        items: dict[Partition, int] = {}
        for key, value in (offsets or {}).items():
            items[_partition(key)] = _non_negative(value, f"offset of partition {key}")
        if len({type(p) for p in items}) > 1:
            raise ValueError(f"expected partitions of one topic or all named by topic, found {sorted(map(str, items))}")
        self._items = dict(sorted(items.items()))
        self._hash: int | None = None

    @classmethod
    def from_json(cls, raw: Mapping[str, Any] | None) -> Offsets:
        """Decode the stored form ``{"0": 100}``."""
        return cls(raw or {})

    def to_json(self) -> dict[str, int]:
        """The stored form: partitions as text keys, in partition order."""
        return {str(p): o for p, o in self._items.items()}

    def merged(self, other: Mapping[Partition, int]) -> Offsets:
        """These offsets with ``other``'s partitions overwritten or added."""
        return Offsets({**self._items, **other})

    def only(self, partitions: Iterable[Partition]) -> Offsets:
        """The offsets of the given partitions that this map has."""
        wanted = set(partitions)
        return Offsets({p: o for p, o in self._items.items() if p in wanted})

    def __getitem__(self, partition: Partition) -> int:
        return self._items[partition]

    def __iter__(self) -> Iterator[Partition]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(tuple(self._items.items()))
        return self._hash

    def __repr__(self) -> str:
        return f"Offsets({self._items})"

    def __reduce__(self) -> tuple[type[Offsets], tuple[dict[Partition, int]]]:
        return (Offsets, (self._items,))

    @classmethod
    def __get_pydantic_core_schema__(cls, _source: Any, _handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        from_mapping = core_schema.no_info_plain_validator_function(
            lambda value: value if isinstance(value, Offsets) else cls(value))
        return core_schema.json_or_python_schema(
            json_schema=core_schema.chain_schema([core_schema.dict_schema(), from_mapping]),
            python_schema=from_mapping,
            serialization=core_schema.plain_serializer_function_ser_schema(lambda o: o.to_json()))


_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
"""What Kafka allows as a topic name."""
_DECIMAL = re.compile(r"-?(0|[1-9][0-9]*)")
"""A number as stored text: ASCII digits, no leading zero (a negative one is refused by its value)."""


def _partition(key: Any) -> Partition:
    """A partition from its number, its stored text (``"0"``, ``"clicks:0"``) or a :class:`TopicPartitionId`."""
    if isinstance(key, TopicPartitionId):
        return TopicPartitionId(key.topic, _non_negative(key.partition, "partition"))
    if isinstance(key, str) and ":" in key:
        topic, _, number = key.rpartition(":")
        if not _TOPIC_NAME.fullmatch(topic):
            raise ValueError(f"partition {key!r}: expected \"topic:partition\" with a Kafka topic name")
        return TopicPartitionId(topic, _non_negative(number, f"partition {key!r}"))
    return _non_negative(key, "partition")


def _non_negative(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str) or (
            isinstance(value, str) and not _DECIMAL.fullmatch(value)):  # one spelling: not "00", "1_0", "٣"
        raise ValueError(f"{what}: expected a non-negative integer, found {value!r}")
    number = int(value)
    if number < 0:
        raise ValueError(f"{what}: expected a non-negative integer, found {number}")
    return number


@dataclass(frozen=True)
class OffsetRange:
    """The records ``[start, end)`` of each partition: ``start`` and ``end`` cover the same partitions."""

    start: Offsets
    end: Offsets

    def __post_init__(self) -> None:
        start, end = Offsets(self.start), Offsets(self.end)
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "end", end)
        if set(start) != set(end):
            raise ValueError(f"expected the same partitions in start and end offsets, "
                             f"found {sorted(start)} and {sorted(end)}")
        backwards = [f"partition {p}: expected end >= start {start[p]}, found {end[p]}"
                     for p in start if end[p] < start[p]]
        if backwards:
            raise ValueError("; ".join(backwards))

    @property
    def partitions(self) -> list[Partition]:
        return list(self.start)

    @property
    def empty(self) -> bool:
        """No partition has a record to read."""
        return self.start == self.end

    def size(self) -> int:
        """Offsets the range spans: an upper bound on its records (transaction markers take offsets too)."""
        return sum(self.end[p] - self.start[p] for p in self.start)

    def __str__(self) -> str:
        return ", ".join(f"{_label(p)}: [{self.start[p]}, {self.end[p]})" for p in self.start)


def _label(partition: Partition) -> str:
    return str(partition) if isinstance(partition, TopicPartitionId) else f"p{partition}"
