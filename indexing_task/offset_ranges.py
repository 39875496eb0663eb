"""Offset ranges and how a task's ranges are cut into splits that run in parallel.

An offset is always the next record to read; a range is ``[start, end)``. Rollup is
associative, so one partition's range may be processed by several splits at once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from segment_store import Partition, kafka_partition

__all__ = ["Split", "plan_splits", "spark_tasks"]


@dataclass(frozen=True)
class Split:
    """A contiguous sub-range ``[start, end)`` of one partition, processed by one Spark task."""

    index: int
    partition: Partition
    start: int
    end: int

    def kafka(self, topic: str | None) -> tuple[str, int]:
        """The Kafka topic and partition number to read (``topic``: the spec's topic, if it has one)."""
        return kafka_partition(self.partition, topic)

    def key(self, topic: str | None, generation: int) -> str:
        """A stable short id of the range: a replica or retry of the same range gets the same key.

        ``generation`` is the committed-offsets version the task was planned against, so a
        range read again after an offsets reset gets new segment ids.
        """
        name, number = self.kafka(topic)
        text = f"{name}/{number}/{self.start}/{self.end}/{generation}"
        return hashlib.sha1(text.encode()).hexdigest()[:12]


def plan_splits(start_offsets: Mapping[Partition, int], end_offsets: Mapping[Partition, int],
                parallelism: int, min_split_records: int = 50_000) -> list[Split]:
    """Cut each partition's range into splits of about ``total / parallelism`` records.

    Splits never go below ``min_split_records`` (a split costs a consumer and a Spark task).
    The plan depends only on its arguments, so a retry with the same ranges plans the same
    splits. Empty ranges get no split.
    """
    if set(start_offsets) != set(end_offsets):
        raise ValueError(f"start and end offsets cover different partitions: "
                         f"{sorted(start_offsets)} vs {sorted(end_offsets)}")
    sizes = {p: end_offsets[p] - start_offsets[p] for p in sorted(start_offsets)}
    bad = {p: n for p, n in sizes.items() if n < 0}
    if bad:
        raise ValueError(f"end offset before start offset in partitions {sorted(bad)}")
    total = sum(sizes.values())
    target = max(min_split_records, -(-total // max(parallelism, 1)))
    splits: list[Split] = []
    for partition, size in sizes.items():
        if size == 0:
            continue
        pieces = -(-size // target)
        start = start_offsets[partition]
        for i in range(pieces):
            lo = start + size * i // pieces
            hi = start + size * (i + 1) // pieces
            splits.append(Split(len(splits), partition, lo, hi))
    return splits


def spark_tasks(splits: list[Split], min_split_records: int = 50_000) -> int:
    """How many Spark tasks should run ``splits``: one per ``min_split_records`` records, at most one per split.

    A small range (a trickle's few seconds of records, over any number of partitions) is one
    Spark task that reads its splits one after the other: each Spark task costs a round trip
    to a Python worker, more than reading a few thousand records.
    """
    records = sum(s.end - s.start for s in splits)
    return min(len(splits), max(1, -(-records // min_split_records)))
