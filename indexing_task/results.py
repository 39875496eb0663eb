"""What a Spark worker reports back to the driver, for indexing splits and compaction intervals alike.

A job (:func:`run_on_workers`) is a plain RDD of indexes, one Spark task each, and each task
yields its :class:`WorkerResult` as one JSON string; the rows themselves never cross into the
JVM. An RDD job rather than a DataFrame one: a DataFrame's planning and code generation cost
the JVM ~0.13 CPU-seconds a job, at a trickle as much as the work itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict
from pyspark.sql import SparkSession

from segment_store import SegmentDescriptor

__all__ = ["WorkerResult", "WrittenSegment", "run_on_workers"]


class WrittenSegment(BaseModel):
    """One segment file a worker wrote."""

    model_config = ConfigDict(frozen=True)
    id: str
    path: str
    size_bytes: int
    checksum: str | None = None
    """Of the file's bytes, where deep storage took one (object stores): the segment cache checks its copies."""
    num_rows: int
    interval_start: datetime
    interval_end: datetime
    min_time: datetime
    max_time: datetime
    complex_columns: dict[str, str] = {}
    """Sketch and first/last columns: name -> kind (``Metric.complex_kind``); queries read them by it."""
    discovered_types: dict[str, str] = {}
    """Typed schema discovery's columns: name -> type in this file; queries widen each to one type by them."""

    def descriptor(self, datasource: str, columns: dict[str, Any]) -> SegmentDescriptor:
        """The segment as the publish transaction (or compaction swap) takes it.

        ``columns``: what its columns mean (:func:`indexing_task.published_columns.recorded_columns`).
        """
        return SegmentDescriptor(
            id=self.id, datasource=datasource, interval_start=self.interval_start, interval_end=self.interval_end,
            path=self.path, size_bytes=self.size_bytes, num_rows=self.num_rows,
            details={"min_time": self.min_time.isoformat(), "max_time": self.max_time.isoformat(),
                     **({"checksum": self.checksum} if self.checksum else {}),
                     **({"complex_columns": self.complex_columns} if self.complex_columns else {}),
                     **({"discovered_types": self.discovered_types} if self.discovered_types else {}),
                     "columns": columns})


class WorkerResult(BaseModel):
    """One Spark task's outcome: a split of an indexing task, or an interval of a compaction."""

    model_config = ConfigDict(frozen=True)
    index: int
    """The split's (or interval's) index in the job's payload."""
    records: int = 0
    """Records read (indexing) or rows read (compaction)."""
    rows_out: int = 0
    unparseable: int = 0
    thrown_away: int = 0
    bad_samples: tuple[dict[str, Any], ...] = ()
    segments: tuple[WrittenSegment, ...] = ()
    dimensions: dict[str, str] = {}
    """Indexing only: the dimensions of the rows and their types, discovered ones included."""
    high_watermarks: dict[int, int] = {}
    """Indexing only: split index -> its partition's high watermark as the split's read last saw it."""
    read_ends: dict[int, int] = {}
    """Indexing only, a task read to the end: split index -> where its read ended."""
    error: str | None = None
    """Compaction only: why the interval could not be compacted."""
    retryable: bool = False
    """Compaction only: the interval's input changed meanwhile; plan it again."""


def run_on_workers(spark: SparkSession, count: int, body: Callable[[Iterator[int]], Iterator[WorkerResult]],
                   tasks: int | None = None) -> list[WorkerResult]:
    """Run ``body`` over ``range(count)`` as one Spark job of ``tasks`` tasks (default one per index).

    Each task gets a contiguous share of the indexes; the results come back ordered by index.
    """
    def encoded(indexes: Iterable[int]) -> Iterable[str]:
        return (result.model_dump_json() for result in body(iter(indexes)))

    rows = spark.sparkContext.parallelize(range(count), tasks or count).mapPartitions(encoded).collect()
    return sorted((WorkerResult.model_validate_json(row) for row in rows), key=lambda r: r.index)
