"""The compaction job: rewrite an interval's visible segments (or some of them) into fewer, larger ones, then swap.

The driver reads each interval's visible set from the timeline and runs one Spark job with one
task per interval (an RDD job, like ingestion): the worker reads the interval's files, rolls
them up again with the ingestion's own combining rules (``Rollup.merge``: count and sums add,
min/max combine; rows are kept as they are without rollup), sorts them and writes files of at
most ``maxRowsPerSegment`` rows under ``{root}/{datasource}/{interval}/compact-{job}-...``. Only
metadata returns to the driver, which swaps each interval in its own transaction
(:func:`segment_store.swap_compacted`): segments appended meanwhile are carried over, and if
another compaction swapped first the interval is compacted again from its new visible set.

An interval's rolled-up rows must fit one worker's memory.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict
from pyspark.sql import SparkSession

from indexing_task.low_priority import LowPriorityProcesses
from indexing_task.partial_rows import as_multi_value, widened
from indexing_task.published_columns import check_segments, recorded_columns
from indexing_task.results import WorkerResult, WrittenSegment, run_on_workers
from indexing_task.rollup import Rollup
from indexing_task.rollup_schema import SEGMENT_START, RollupSchema
from indexing_task.spark_worker import freeze_survivors, write_segment_file
from indexing_task.task_errors import IndexingError, TaskStopped
from segment_store import CompactionSwap, SegmentDescriptor, SegmentRecord, SwapOutcome, swap_compacted
from segment_store.deep_storage import DeepStorage
from segment_store.timeline import Interval, visible_by_interval, visible_segments
from segment_store.value_types import arrow_type, value_type, widest_types
from specs import SupervisorSpec

__all__ = ["CompactionError", "CompactionReport", "Selection", "compact"]

logger = logging.getLogger(__name__)



class CompactionError(IndexingError):
    """A compaction job could not run (e.g. segment files do not match the spec's columns)."""


class _IntervalInput(BaseModel):
    model_config = ConfigDict(frozen=True)
    start: datetime
    end: datetime
    paths: tuple[str, ...]


class _Payload(BaseModel):
    """Shipped to the workers with the Spark job."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)
    job_id: str
    datasource: str
    rollup_schema: RollupSchema
    deep_storage: str
    storage_options: dict[str, Any] = {}
    segment_cache: str | None = None
    max_rows_per_segment: int
    intervals: tuple[_IntervalInput, ...]
    discovered_types: dict[str, str] = {}
    """Typed discovery: each discovered column's widest type in the whole datasource (every interval's files
    take it, so a query widening them reads the same values as before compaction)."""


@dataclass(frozen=True)
class CompactionReport:
    """One interval: what was read, what was written, and the swap's outcome."""

    datasource: str
    interval_start: datetime
    interval_end: datetime
    input_segments: int
    input_rows: int
    output_segments: tuple[SegmentDescriptor, ...]
    outcome: SwapOutcome
    attempts: int
    seconds: float

    @property
    def output_rows(self) -> int:
        return sum(s.num_rows for s in self.output_segments)


def _run_intervals(payload: _Payload, indexes: Iterator[int]) -> Iterator[WorkerResult]:
    """A Spark task's body (:func:`indexing_task.results.run_on_workers`): compact the intervals it is given."""
    from pyspark import TaskContext

    context = TaskContext.get()
    attempt = context.attemptNumber() if context else 0
    for index in indexes:
        try:
            rows_in, segments = _compact_interval(payload, index, attempt)
            yield WorkerResult(index=index, records=rows_in, segments=tuple(segments))
        except CompactionError as exc:
            yield WorkerResult(index=index, error=str(exc))
        except FileNotFoundError as exc:  # an input was replaced and cleaned up meanwhile: plan again
            yield WorkerResult(index=index, error=f"input file gone: {exc}", retryable=True)
    freeze_survivors()


def _compact_interval(payload: _Payload, index: int, attempt: int) -> tuple[int, list[WrittenSegment]]:
    """Read, roll up and write one interval; return (rows read, written files' metadata)."""
    storage = DeepStorage(payload.deep_storage, payload.storage_options, copy_to=payload.segment_cache)
    target = payload.intervals[index]
    tables = []
    for path in target.paths:
        with storage.fs.open(path, "rb") as f:
            tables.append(pq.read_table(f))
    rollup_schema = payload.rollup_schema
    if rollup_schema.discover_types:  # the files' other columns were discovered: each takes its widest type
        known = set(rollup_schema.output_columns)
        found = widest_types({f.name: kind for f in t.schema if f.name not in known
                              and (kind := value_type(f.type)) is not None} for t in tables)
        rollup_schema = rollup_schema.with_dimensions(widest_types([found, {
            name: kind for name, kind in payload.discovered_types.items() if name in found}]))
        wider = {name: arrow_type(kind) for name, kind in rollup_schema.discovered_types.items()}
        tables = [pa.table({c: widened(t.column(c), wider[c]) if c in wider else t.column(c) for c in t.column_names})
                  for t in tables]
    elif rollup_schema.discover:  # the string columns of the files are the dimensions discovered so far
        rollup_schema = rollup_schema.with_dimensions(
            [f.name for t in tables for f in t.schema if f.type in (pa.string(), pa.list_(pa.string()))])
    multi_value = {f.name for t in tables for f in t.schema if pa.types.is_list(f.type)}
    if multi_value:  # a dimension multi-value in any file is in the compacted one (one-element lists elsewhere)
        rollup_schema = rollup_schema.with_multi_value(multi_value)
        tables = [pa.table({c: as_multi_value(t.column(c)) if c in multi_value else t.column(c)
                            for c in t.column_names}) for t in tables]
    expected = rollup_schema.output_columns
    for path, table in zip(target.paths, tables, strict=True):
        unknown = [c for c in table.column_names if c not in expected]
        if unknown:  # a dropped column: merging would lose its values, so queries would change
            raise CompactionError(f"{path}: columns {unknown} are not in the spec (expected {expected}); "
                                  "compacting would drop their values")
    try:
        found = pa.unify_schemas([t.schema for t in tables])
    except (pa.ArrowTypeError, pa.ArrowInvalid) as exc:  # e.g. a field discovered as text, then listed as a LONG
        raise CompactionError(f"files of one interval disagree on a column's type ({exc}): they cannot be "
                              "merged") from None
    spec_types = rollup_schema.arrow_types
    schema = pa.schema([found.field(c) if c in found.names else pa.field(c, spec_types[c]) for c in expected])
    tables = [_with_columns(t, schema) for t in tables]  # nulls for columns an older spec did not have
    rollup = Rollup(rollup_schema)
    try:  # the merge groups by segment start too: one constant here, the rows are all of one interval
        merged = rollup.merge([t.append_column(SEGMENT_START, pa.array(np.zeros(t.num_rows, dtype=np.int64)))
                               for t in tables])
        merged = rollup.sort(merged.select(expected)).cast(schema)
    finally:
        rollup.close()
    attempt_id = f"compact-{payload.job_id}-i{index:04d}-a{attempt}"
    written = [write_segment_file(storage, payload.datasource, target.start, target.end, attempt_id, attempt_id, part,
                                  merged.slice(offset, payload.max_rows_per_segment), rollup_schema)
               for part, offset in enumerate(range(0, merged.num_rows, payload.max_rows_per_segment))]
    return sum(t.num_rows for t in tables), written


def _with_columns(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with every column of ``schema``, in its order (nulls where the table has none)."""
    return pa.table([table.column(f.name) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
                     for f in schema], schema=schema)


Selection = Callable[[Interval, list[SegmentRecord]], list[SegmentRecord]]
"""Given an exact interval and its visible segments, the ones to merge (all of one version; empty: none)."""


def _at_least(min_segments: int) -> Selection:
    return lambda _interval, segments: segments if len(segments) >= min_segments else []


def _plan(engine: sa.Engine, datasource: str, within: Interval | None, select: Selection
          ) -> dict[Interval, list[SegmentRecord]]:
    """What ``select`` picks of every exact interval inside ``within``."""
    chunks = visible_by_interval(visible_segments(engine, datasource, within))
    picked = {iv: select(iv, segs) for iv, segs in chunks.items()
              if within is None or (within[0] <= iv[0] and iv[1] <= within[1])}
    return {iv: segs for iv, segs in picked.items() if segs}


BACKGROUND_MAX_BYTES = 4 * 1024 * 1024
"""A compaction reading at most this much runs in a low-priority process (:mod:`indexing_task.low_priority`): as
a Spark job, merging a trickle's small files (the fresh intervals' lower tiers) cost ~1-2 s of a core, mostly
the job's own."""


def _compact_all(payload: _Payload) -> list[WorkerResult]:
    """Every interval of ``payload``, in a low-priority process."""
    return list(_run_intervals(payload, iter(range(len(payload.intervals)))))


def _run_job(spark: SparkSession, payload: _Payload, background: LowPriorityProcesses | None,
             check_stop: Callable[[], None]) -> list[WorkerResult]:
    """The job's intervals compacted in a ``background`` process if given, else as a Spark job.

    ``check_stop()`` is called before, and every 0.1 s while a process works (a stopped compaction
    leaves its process to finish files nothing will reference).
    """
    check_stop()
    if background is not None:
        done = background.submit(partial(_compact_all, payload))
        while not futures_wait([done], timeout=0.1).done:
            check_stop()
        check_stop()  # a shutdown cancels the work it has not started: that is a stop, not a failure
        results = done.result()
    else:
        spark.sparkContext.setJobDescription(f"compact {payload.datasource} job {payload.job_id}")
        results = run_on_workers(spark, len(payload.intervals), partial(_run_intervals, payload))
    errors = [r.error for r in results if r.error and not r.retryable]
    if errors:
        raise CompactionError(f"compaction {payload.job_id} of {payload.datasource!r}: {errors[0]}")
    return results


def compact(spark: SparkSession, engine: sa.Engine, spec: SupervisorSpec, deep_storage: str,
            interval: Interval | None = None, *, storage_options: dict[str, Any] | None = None,
            max_rows_per_segment: int | None = None, min_segments: int = 2, select: Selection | None = None,
            max_attempts: int = 3, background: LowPriorityProcesses | None = None,
            stop: threading.Event | None = None, segment_cache: str | None = None) -> list[CompactionReport]:
    """Compact every exact interval of ``spec``'s datasource inside ``interval`` (all when None).

    The spec's metrics say how rows merge and its ``maxRowsPerSegment`` caps the files (unless
    given). ``select`` picks what to merge of each interval's visible segments (by default all
    of them when there are ``min_segments`` or more; the others are kept as they are). An
    interval whose swap is retryable is planned and compacted again, up to ``max_attempts``
    times. A job reading at most :data:`BACKGROUND_MAX_BYTES` runs in one of the ``background``
    processes if given. Raises :class:`CompactionError` if a job fails, :class:`TaskStopped` once ``stop`` is set
    (checked before each job and each swap), :class:`specs.SpecError` if ``spec`` gives a column of the
    datasource's segments another meaning (:func:`indexing_task.published_columns.check_segments`).
    ``segment_cache``: a segment cache's directory on the workers' machine, to leave copies of the new files in.
    """
    datasource = spec.datasource
    check_segments(visible_segments(engine, datasource), spec)  # merged another way, queries would answer otherwise
    job = _Compaction(engine, spec, deep_storage, storage_options, max_rows_per_segment, stop, segment_cache)
    reports: list[CompactionReport] = []
    select = select or _at_least(min_segments)
    pending = _plan(engine, datasource, interval, select)
    for attempt in range(1, max_attempts + 1):
        if not pending:
            break
        started = time.monotonic()
        payload = job.new_payload(pending)
        logger.info("compaction %s: datasource=%s intervals=%d segments=%d (attempt %d)", payload.job_id, datasource,
                    len(pending), sum(len(v) for v in pending.values()), attempt)
        retry: list[Interval] = []
        small = sum(r.size_bytes for read in pending.values() for r in read) <= BACKGROUND_MAX_BYTES
        rows = _run_job(spark, payload, background if small else None, job.check_stop)
        for row, ((start, end), read) in zip(rows, pending.items(), strict=True):
            segments, outcome = job.swap(row, start, end, read)
            if outcome.status == "retryable" and attempt < max_attempts:
                retry.append((start, end))
                continue
            reports.append(CompactionReport(datasource, start, end, len(read), row.records, segments,
                                            outcome, attempt, time.monotonic() - started))
            job.swapped += outcome.ok
        replanned = _plan(engine, datasource, interval, select) if retry else {}
        pending = {iv: replanned[iv] for iv in retry if iv in replanned}  # again, from their current visible sets
    return sorted(reports, key=lambda r: r.interval_start)


class _Compaction:
    """One :func:`compact` call's settings, its current job, and how many intervals it has swapped so far."""

    def __init__(self, engine: sa.Engine, spec: SupervisorSpec, deep_storage: str,
                 storage_options: dict[str, Any] | None, max_rows_per_segment: int | None,
                 stop: threading.Event | None, segment_cache: str | None) -> None:
        self.engine, self.datasource, self.stop, self.segment_cache = engine, spec.datasource, stop, segment_cache
        self.deep_storage, self.storage_options = deep_storage, storage_options
        self.columns = recorded_columns(spec)
        self.schema = RollupSchema.from_spec(spec.spec.data_schema)
        self.max_rows = max_rows_per_segment or spec.spec.tuning_config.max_rows_per_segment
        self.job_id = ""
        self.swapped = 0

    def new_payload(self, pending: dict[Interval, list[SegmentRecord]]) -> _Payload:
        """A new job (a new id) compacting ``pending``'s intervals from the segments picked of each."""
        self.job_id = uuid.uuid4().hex[:12]
        return _Payload(job_id=self.job_id, datasource=self.datasource, rollup_schema=self.schema,
                        deep_storage=self.deep_storage, storage_options=self.storage_options or {},
                        segment_cache=self.segment_cache,
                        max_rows_per_segment=self.max_rows,
                        discovered_types=widest_types(s.descriptor.get("discovered_types", {})
                                                      for s in visible_segments(self.engine, self.datasource)),
                        intervals=tuple(_IntervalInput(start=s, end=e, paths=tuple(r.path for r in segs))
                                        for (s, e), segs in pending.items()))

    def check_stop(self) -> None:
        """Raise :class:`TaskStopped` once ``stop`` is set, saying how many intervals were swapped before it."""
        if self.stop is not None and self.stop.is_set():
            swapped = self.swapped
            done = f"{swapped} interval{'s were' if swapped > 1 else ' was'} swapped before the stop" if swapped \
                else "nothing was swapped"
            raise TaskStopped(f"compaction {self.job_id} of {self.datasource!r} was stopped; {done}")

    def swap(self, row: WorkerResult, start: datetime, end: datetime, read: list[SegmentRecord],
             ) -> tuple[tuple[SegmentDescriptor, ...], SwapOutcome]:
        """Swap one interval's written segments in for the ones ``read`` (unless its worker said to plan it again)."""
        self.check_stop()
        read_ids = frozenset(r.id for r in read)
        segments = tuple(s.descriptor(self.datasource, self.columns) for s in row.segments)
        outcome = (SwapOutcome("retryable", row.error or "") if row.retryable else
                   swap_compacted(self.engine, CompactionSwap(self.datasource, start, end, read[0].version, read_ids,
                                                              segments, self.job_id),
                                  DeepStorage(self.deep_storage, self.storage_options)))
        return segments, outcome
