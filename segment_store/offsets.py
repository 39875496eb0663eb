"""Kafka offsets as values: a frozen partition -> offset map and an offset range.

An offset is always **the next record to read**: a partition whose offset is 100 has had
records 0..99 read (or skipped), and record 100 comes next. A range ``[start, end)`` covers
the records from ``start`` up to, not including, ``end``; ``end`` is where the next range
starts. Offsets are never "the last record read".

Stored and sent as JSON objects with partition numbers as string keys (``{"0": 100}``);
:meth:`Offsets.to_json` and :meth:`Offsets.from_json` are the only encoding.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

__all__ = ["OffsetRange", "Offsets"]


class Offsets(Mapping[int, int]):
    """A frozen map partition -> offset (the next record to read), sorted by partition.

    Built from any mapping whose keys and values are non-negative integers (or their decimal
    strings, as in stored JSON); anything else raises ``ValueError`` naming the partition.
    """

    __slots__ = ("_items", "_hash")

    def __init__(self, offsets: Mapping[Any, Any] | None = None) -> None:
        items: dict[int, int] = {}
        for key, value in (offsets or {}).items():
            partition, offset = _non_negative(key, "partition"), _non_negative(value, f"offset of partition {key}")
            items[partition] = offset
        self._items = dict(sorted(items.items()))
        self._hash: int | None = None

    @classmethod
    def from_json(cls, raw: Mapping[str, Any] | None) -> Offsets:
        """Decode the stored form ``{"0": 100}``."""
        return cls(raw or {})

    def to_json(self) -> dict[str, int]:
        """The stored form: partition numbers as string keys, in partition order."""
        return {str(p): o for p, o in self._items.items()}

    def merged(self, other: Mapping[int, int]) -> Offsets:
        """These offsets with ``other``'s partitions overwritten or added."""
        return Offsets({**self._items, **other})

    def only(self, partitions: Iterable[int]) -> Offsets:
        """The offsets of the given partitions that this map has."""
        wanted = set(partitions)
        return Offsets({p: o for p, o in self._items.items() if p in wanted})

    def __getitem__(self, partition: int) -> int:
        return self._items[partition]

    def __iter__(self) -> Iterator[int]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(tuple(self._items.items()))
        return self._hash

    def __repr__(self) -> str:
        return f"Offsets({self._items})"

    def __reduce__(self) -> tuple[type[Offsets], tuple[dict[int, int]]]:
        return (Offsets, (self._items,))

    @classmethod
    def __get_pydantic_core_schema__(cls, _source: Any, _handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        from_mapping = core_schema.no_info_plain_validator_function(
            lambda value: value if isinstance(value, Offsets) else cls(value))
        return core_schema.json_or_python_schema(
            json_schema=core_schema.chain_schema([core_schema.dict_schema(), from_mapping]),
            python_schema=from_mapping,
            serialization=core_schema.plain_serializer_function_ser_schema(lambda o: o.to_json()))


def _non_negative(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"{what}: expected a non-negative integer, found {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"{what}: expected a non-negative integer, found {value!r}") from None
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
    def partitions(self) -> list[int]:
        return list(self.start)

    @property
    def empty(self) -> bool:
        """No partition has a record to read."""
        return self.start == self.end

    def size(self) -> int:
        """Offsets the range spans: an upper bound on its records (transaction markers take offsets too)."""
        return sum(self.end[p] - self.start[p] for p in self.start)

    def __str__(self) -> str:
        return ", ".join(f"p{p}: [{self.start[p]}, {self.end[p]})" for p in self.start)
