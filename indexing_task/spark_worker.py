"""What runs inside a Spark Python worker: read one split, roll it up, write its segment files.

Only metadata goes back to the driver (one small row per split); the rows themselves go
straight from the worker to deep storage as zstd Parquet.
"""

from __future__ import annotations

import copy
import gc
import hashlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, Message
from pydantic import BaseModel, ConfigDict

from indexing_task.offset_ranges import Split
from indexing_task.reader import read_ranges
from indexing_task.results import WorkerResult, WrittenSegment
from indexing_task.rollup import ParsedBatch, Rollup
from indexing_task.rollup_schema import TIME, RollupSchema
from indexing_task.task_errors import RangeNotReadableError
from segment_store import TopicPartitionId
from segment_store.deep_storage import DeepStorage

__all__ = ["TaskPayload", "cyclic_gc_paused", "freeze_survivors", "index_small_tasks", "index_split", "index_splits",
           "record_metadata", "run_splits", "write_segment_file"]

CHUNK_RECORDS = 200_000
MAX_SAMPLES = 20

class TaskPayload(BaseModel):
    """Everything a worker needs, shipped from the driver with the Spark job."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    task_id: str
    datasource: str
    topic: str | None
    """The spec's topic (None with a topicPattern: each split's partition names its topic)."""
    consumer_config: dict[str, Any]
    rollup_schema: RollupSchema
    deep_storage: str
    storage_options: dict[str, Any] = {}
    segment_cache: str | None = None
    generation: int = 0
    max_rows_in_memory: int = 150_000
    max_rows_per_segment: int = 5_000_000
    read_timeout_s: float = 30.0
    min_time: datetime | None = None
    max_time: datetime | None = None
    splits: tuple[Split, ...] = ()
    read_to_end: bool = False
    """Each split ends where its partition does when read, at most at its end (a quiet topic's task,
    planned without asking the broker how far its partitions go)."""


def run_splits(payload: TaskPayload, split_indexes: Iterator[int]) -> Iterator[WorkerResult]:
    """A Spark task's body (:func:`indexing_task.results.run_on_workers`): index the splits it is given."""
    from pyspark import TaskContext

    context = TaskContext.get()
    attempt = context.attemptNumber() if context else 0
    splits = [payload.splits[i] for i in split_indexes]
    if splits:
        yield index_splits(payload, splits, attempt)
    freeze_survivors()


def freeze_survivors() -> None:
    """Collect this task's garbage, then exempt every object still alive from later collections.

    A reused Spark Python worker runs a full ``gc.collect()`` after every task. Its heap holds
    the modules of pyarrow, DuckDB, pydantic and the indexer (~120k objects): that collection
    took 0.15-0.3 s, 72% of the workers' CPU at a steady 500 events/s. What survives a task
    (modules, caches) lives as long as the worker, so frozen (:func:`gc.freeze`) the next
    collections walk only what the next task leaves. Objects frozen are still freed by
    reference counting.
    """
    gc.collect()
    gc.freeze()


@contextmanager
def cyclic_gc_paused(pause: bool = True) -> Iterator[None]:
    """Pause Python's cyclic garbage collector (reference counting still frees everything).

    A split allocates a few hundred thousand Kafka message objects and keeps a chunk of them
    alive: the collector would run thousands of times and walk the live ones each time, which
    measured a third of the worker's CPU. The split's objects are freed by reference counting;
    anything cyclic (an exception's traceback) is collected once the split is done.
    ``pause=False`` leaves the collector as it is (the benchmarks' default-GC baselines).
    """
    enabled = gc.isenabled()
    if pause:
        gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def index_split(payload: TaskPayload, split: Split, attempt: int = 0) -> WorkerResult:
    """Read ``split`` exactly, roll it up and write its files; return what it did."""
    return index_splits(payload, [split], attempt)


def index_splits(payload: TaskPayload, splits: Sequence[Split], attempt: int = 0) -> WorkerResult:
    """Read ``splits`` exactly, roll them up together and write their files.

    A small task's splits (a trickle's partitions) are read together, parsed as one batch and
    written as one file per interval: the parse's fixed cost (~25 ms) and a file are paid once,
    not per partition. A big task's are read one after the other, a chunk at a time.
    """
    ranges, highs, ends = _kafka_ranges(payload, splits), dict[int, int](), _open_ends(payload, splits)
    with cyclic_gc_paused():
        consumer = Consumer(payload.consumer_config)
        try:
            return _index_chunks(payload, splits, attempt, _chunks(consumer, payload, ranges, highs, ends), highs,
                                 ends)
        finally:
            consumer.close()


def index_small_tasks(tasks: Sequence[tuple[TaskPayload, Sequence[Split]]]) -> list[WorkerResult | Exception]:
    """Small tasks' splits read by one consumer, one fetch for them all; then each task rolled up and written alone.

    Two or more tasks have the same consumer settings and no two of their splits read one
    partition (the caller groups them so); one task is indexed as :func:`index_splits` does. A
    task gets its result, or the error that stopped it (a range that cannot be read, files that
    cannot be written): neither touches the other tasks.
    """
    if len(tasks) == 1:
        try:
            return [index_splits(*tasks[0])]
        except Exception as exc:
            return [exc]
    ranges = [one for payload, splits in tasks for one in _kafka_ranges(payload, splits)]
    owners = [n for n, (_, splits) in enumerate(tasks) for _ in splits]
    failed: dict[int, RangeNotReadableError] = {}
    highs: dict[int, int] = {}
    ends = {i: end for i, end in enumerate(r[3] for r in ranges) if tasks[owners[i]][0].read_to_end}
    outcomes: list[WorkerResult | Exception] = []
    with cyclic_gc_paused():
        try:
            consumer = Consumer(tasks[0][0].consumer_config)
            try:
                read = _read_together(consumer, ranges, min(payload.read_timeout_s for payload, _ in tasks), failed,
                                      highs, ends)
            finally:
                consumer.close()
        except Exception as exc:  # the consumer itself failed: every task with it
            return [copy.copy(exc) for _ in tasks]
        for n, (payload, splits) in enumerate(tasks):
            mine = [i for i, owner in enumerate(owners) if owner == n]
            error = next((failed[i] for i in mine if i in failed), None)
            try:
                if error is not None:
                    raise error
                messages = [message for i in mine for message in read[i]]
                outcomes.append(_index_chunks(payload, splits, 0, [messages] if messages else [],
                                              {k: highs[i] for k, i in enumerate(mine) if i in highs},
                                              {k: ends[i] for k, i in enumerate(mine) if i in ends}))
            except Exception as exc:
                outcomes.append(exc)
    return outcomes


def _kafka_ranges(payload: TaskPayload, splits: Sequence[Split]) -> list[tuple[str, int, int, int]]:
    """Each split as the reader takes it: ``(topic, partition, start, end)``."""
    return [(*split.kafka(payload.topic), split.start, split.end) for split in splits]


def _open_ends(payload: TaskPayload, splits: Sequence[Split]) -> dict[int, int]:
    """The splits that end where their partitions do (:attr:`TaskPayload.read_to_end`), by index: their ends."""
    return {n: split.end for n, split in enumerate(splits)} if payload.read_to_end else {}


def _chunks(consumer: Consumer, payload: TaskPayload, ranges: list[tuple[str, int, int, int]],
            highs: dict[int, int], ends: dict[int, int]) -> Iterator[list[Message]]:
    """The ranges' records, in order and each range in offset order, a chunk at a time.

    ``highs`` gets each range's high watermark as :func:`read_ranges` reports it, ``ends`` where the
    ranges it holds ended (ranges read to their partitions' ends are read together, in one chunk).
    """
    if ends or (sum(end - start for *_, start, end in ranges) <= CHUNK_RECORDS
                and len({r[:2] for r in ranges}) == len(ranges)):
        together = [message for batch in _read_together(consumer, ranges, payload.read_timeout_s, None, highs, ends)
                    for message in batch]
        if together:
            yield together
        return
    buffered: list[Message] = []
    for n, one in enumerate(ranges):
        high: dict[int, int] = {}
        for _, batch in read_ranges(consumer, [one], payload.read_timeout_s, highs=high):
            buffered.extend(batch)
            if len(buffered) >= CHUNK_RECORDS:
                yield buffered
                buffered = []
        if high:
            highs[n] = high[0]
    if buffered:
        yield buffered


def _index_chunks(payload: TaskPayload, splits: Sequence[Split], attempt: int, chunks: Iterable[list[Message]],
                  highs: dict[int, int], ends: dict[int, int]) -> WorkerResult:
    """Roll up the splits' records, chunk by chunk, and write their files.

    ``highs`` holds the high watermark the read of ``splits[n]`` saw under ``n`` once the chunks are read,
    ``ends`` where it ended if it was read to its partition's end.
    """
    storage = DeepStorage(payload.deep_storage, payload.storage_options, copy_to=payload.segment_cache)
    rollup = Rollup(payload.rollup_schema, payload.min_time, payload.max_time)
    writer = _SegmentWriter(payload, splits, attempt, storage, rollup)
    records = unparseable = thrown_away = 0
    samples: list[dict[str, Any]] = []
    partials: list[pa.Table] = []
    needs = payload.rollup_schema.metadata_needs
    try:
        for messages in chunks:
            parsed = rollup.parse([m.value() for m in messages], record_metadata(needs, messages) if needs else None)
            records += len(messages)
            unparseable += parsed.bad_count
            thrown_away += parsed.thrown_away
            samples.extend(_samples(parsed, messages, payload.topic, MAX_SAMPLES - len(samples)))
            partials.append(parsed.rows)
            if sum(p.num_rows for p in partials) > payload.max_rows_in_memory:
                partials = [rollup.merge(partials)]
                if partials[0].num_rows > payload.max_rows_in_memory:
                    writer.write(partials.pop())
        if partials:
            writer.write(rollup.merge(partials))
    finally:
        rollup.close()
    return WorkerResult(index=splits[0].index, records=records, rows_out=writer.rows_out, unparseable=unparseable,
                        thrown_away=thrown_away, bad_samples=tuple(samples), segments=tuple(writer.segments),
                        dimensions={d.name: d.type for d in rollup.schema.dimensions},
                        high_watermarks={splits[n].index: high for n, high in highs.items()},
                        read_ends={splits[n].index: end for n, end in ends.items()})


def _read_together(consumer: Consumer, ranges: list[tuple[str, int, int, int]], stall_timeout_s: float,
                   failed: dict[int, RangeNotReadableError] | None, highs: dict[int, int],
                   ends: dict[int, int] | None = None) -> list[list[Message]]:
    """Ranges of different partitions read at once: each range's records, in offset order (:func:`read_ranges`)."""
    batches: list[list[Message]] = [[] for _ in ranges]
    for i, batch in read_ranges(consumer, ranges, stall_timeout_s, failed, highs, ends):
        batches[i].extend(batch)
    return batches


def record_metadata(needs: list[str], messages: list[Message]) -> dict[str, pa.Array]:
    """The Kafka metadata the parse reads (key, timestamp, topic, offset, headers), one array per need."""
    out: dict[str, pa.Array] = {}
    for need in needs:
        if need == "key":
            out[need] = pa.array([m.key() for m in messages], pa.binary())
        elif need == "timestamp":  # (type, ms); type 0 is "not available"
            out[need] = pa.array([ts if kind else None for kind, ts in (m.timestamp() for m in messages)], pa.int64())
        elif need == "topic":
            out[need] = pa.array([m.topic() for m in messages], pa.string())
        elif need == "offset":
            out[need] = pa.array([m.offset() for m in messages], pa.int64())
        else:  # header:<name>: the last header of that name, as Druid keeps it
            name = need.removeprefix("header:")
            out[need] = pa.array([next((v for k, v in reversed(m.headers() or ()) if k == name), None)
                                  for m in messages], pa.binary())
    return out


def _samples(parsed: ParsedBatch, messages: list[Message], topic: str | None, limit: int) -> list[dict[str, Any]]:
    """The bad records' samples; a partition is its number, or ``topic:number`` under a ``topicPattern``."""
    def shown(message: Message) -> int | str:
        number = message.partition()
        assert number is not None
        return number if topic is not None else str(TopicPartitionId(str(message.topic()), number))

    return [{"partition": shown(messages[bad.index]), "offset": messages[bad.index].offset(), "reason": bad.reason,
             "value": bad.value} for bad in parsed.bad_samples[:max(limit, 0)]]


class _SegmentWriter:
    """Writes rolled-up rows as segment files of at most ``max_rows_per_segment`` rows."""

    def __init__(self, payload: TaskPayload, splits: Sequence[Split], attempt: int, storage: DeepStorage,
                 rollup: Rollup) -> None:
        self.payload = payload
        self.storage = storage
        self.rollup = rollup
        keys = [split.key(payload.topic, payload.generation) for split in splits]  # a retry's are the same
        self.split_key = keys[0] if len(keys) == 1 else hashlib.sha1("+".join(keys).encode()).hexdigest()[:12]
        self.attempt_id = f"{payload.task_id}-s{splits[0].index:04d}-a{attempt}"
        self.part = 0
        self.rows_out = 0
        self.segments: list[WrittenSegment] = []

    def write(self, rows: pa.Table) -> None:
        step = self.payload.max_rows_per_segment
        for start, end, table in self.rollup.split_by_segment(rows):
            for offset in range(0, table.num_rows, step):
                self._write_file(start, end, table.slice(offset, step))

    def _write_file(self, start: datetime, end: datetime, table: pa.Table) -> None:
        self.segments.append(write_segment_file(self.storage, self.payload.datasource, start, end, self.attempt_id,
                                                self.split_key, self.part, table, self.rollup.schema))
        self.part += 1
        self.rows_out += table.num_rows


def write_segment_file(storage: DeepStorage, datasource: str, start: datetime, end: datetime, attempt_id: str,
                       id_key: str, part: int, table: pa.Table, schema: RollupSchema) -> WrittenSegment:
    """Write ``table`` as segment file ``part`` of an attempt (zstd Parquet); return what was written.

    The ``schema`` the rows were rolled up with names the columns that are not plain values
    (:attr:`RollupSchema.complex_columns`) and the discovered types (:attr:`RollupSchema.discovered_types`).

    The segment id is ``{datasource}_{start}_{end}_{id_key}_{part}``.
    """
    path = storage.path_for(datasource, start, end, attempt_id, part)
    written = storage.write_table(path, table, row_group_size=1_000_000)
    times = table.column(TIME)
    return WrittenSegment(
        id=f"{datasource}_{start:%Y%m%dT%H%M%SZ}_{end:%Y%m%dT%H%M%SZ}_{id_key}_{part}", path=path,
        size_bytes=written.size_bytes, checksum=written.checksum, num_rows=table.num_rows, interval_start=start,
        interval_end=end,
        min_time=pc.min(times).as_py(), max_time=pc.max(times).as_py(), complex_columns=schema.complex_columns,
        discovered_types=schema.discovered_types)
