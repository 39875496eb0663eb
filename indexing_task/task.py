"""One indexing task: fixed per-partition ranges in, published segments (or nothing) out.

The driver plans splits, runs them as one Spark job (an RDD of split indexes; workers write the
files), checks the parse-error budget, and then publishes segments and end offsets in one
transaction. A task that fails or loses the start-offset check publishes nothing; its
files are orphans for the cleanup job.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from typing import Any

import sqlalchemy as sa
from pyspark.sql import SparkSession

from indexing_task.cluster_looks import shared_topic_ids
from indexing_task.group_commit import GroupCommit
from indexing_task.offset_ranges import Split, plan_splits, spark_tasks
from indexing_task.published_columns import recorded_columns
from indexing_task.reader import consumer_config, resolved_consumer_properties
from indexing_task.resident import ResidentRunners
from indexing_task.results import WorkerResult, run_on_workers
from indexing_task.rollup_schema import RollupSchema
from indexing_task.spark import INGEST_POOL, default_parallelism, use_pool
from indexing_task.spark_worker import TaskPayload, run_splits
from indexing_task.step_costs import STEP_COSTS
from indexing_task.task_errors import IndexingError, TaskStopped, TooManyParseErrors
from indexing_task.watermarks import partition_topic_ids
from segment_store import (
    DeepStorage,
    Offsets,
    Partition,
    PublishOutcome,
    PublishRequest,
    SegmentDescriptor,
    publish,
)
from segment_store.value_types import widest_types
from specs import DataSchemaSpec, InputFormatSpec, SupervisorSpec

__all__ = ["IndexTaskRequest", "TaskReport", "run_index_task"]

logger = logging.getLogger(__name__)

BeforePublish = Callable[["IndexTaskRequest"], None]
"""A hook run after a task's files are written and before it publishes (fault-injection tests)."""


@dataclass(frozen=True)
class IndexTaskRequest:
    """A task: a supervisor spec and the exact ranges ``[start, end)`` it must index."""

    task_id: str
    spec: SupervisorSpec
    start_offsets: Offsets
    end_offsets: Offsets
    initial_offsets: Offsets
    deep_storage: str
    generation: int = 0
    """The committed-offsets version the task was planned against (part of its segment ids)."""
    epoch: int = 0
    """The committed offsets' epoch the task was planned under: a reset since then refuses its publish."""
    leader_epoch: int | None = None
    """The leader epoch of the overlord that planned it: a new leader since then refuses its publish."""
    bootstrap_servers: str | None = None
    storage_options: Mapping[str, Any] = field(default_factory=dict)
    segment_cache: str | None = None
    """A segment cache's directory on the workers' machine: they leave a copy of each file they write there."""
    min_time: datetime | None = None
    max_time: datetime | None = None
    min_split_records: int = 50_000
    read_to_end: bool = False
    """Read each partition to where it ends when read, at most to ``end_offsets`` (one split each): a quiet
    topic's task, planned without asking the broker. The publish commits where the reads ended."""

    def __post_init__(self) -> None:
        for name in ("start_offsets", "end_offsets", "initial_offsets"):
            object.__setattr__(self, name, Offsets(getattr(self, name)))


@dataclass(frozen=True)
class TaskReport:
    """What a task did: counts, files, and the publish outcome."""

    task_id: str
    datasource: str
    start_offsets: Mapping[Partition, int]
    end_offsets: Mapping[Partition, int]
    records: int
    rows_out: int
    unparseable: int
    thrown_away: int
    segments: tuple[SegmentDescriptor, ...]
    bad_samples: tuple[Mapping[str, Any], ...]
    outcome: PublishOutcome
    index_seconds: float
    publish_seconds: float
    dimensions: Mapping[str, str] = field(default_factory=dict)
    """The dimensions of the rows written and their types, discovered ones included."""
    high_watermarks: Mapping[Partition, int] = field(default_factory=dict)
    """Each partition's high watermark as the task's read last saw it: how far it had grown meanwhile."""

    @property
    def processed(self) -> int:
        return self.records - self.unparseable - self.thrown_away


def _read_ends(request: IndexTaskRequest, payload: TaskPayload, results: list[WorkerResult]) -> Offsets:
    """Where a task read to the end stopped in each partition (its start where it had no split)."""
    ends = dict(request.start_offsets)
    for result in results:
        for index, end in result.read_ends.items():
            ends[payload.splits[index].partition] = end
    if len(ends) != len(request.start_offsets) or any(
            not request.start_offsets[p] <= ends[p] <= request.end_offsets[p] for p in ends):
        raise IndexingError(f"task {request.task_id}: reads ended at {ends}, outside {request.start_offsets.to_json()}"
                            f" -> {request.end_offsets.to_json()}")
    return Offsets(ends)


def _high_watermarks(payload: TaskPayload, results: list[WorkerResult]) -> dict[Partition, int]:
    """Each partition's highest high watermark the task's splits saw."""
    highs: dict[Partition, int] = {}
    for result in results:
        for index, high in result.high_watermarks.items():
            partition = payload.splits[index].partition
            highs[partition] = max(high, highs.get(partition, high))
    return highs


def run_index_task(spark: SparkSession, engine: sa.Engine, request: IndexTaskRequest,
                   stop: threading.Event | None = None, before_publish: BeforePublish | None = None,
                   resident: ResidentRunners | None = None, publisher: GroupCommit | None = None) -> TaskReport:
    """Index the request's ranges and publish them. Raises on a failed job or too many bad records.

    A set ``stop`` event (shutdown, reset) makes the task raise :class:`TaskStopped` instead of
    publishing. ``before_publish`` runs between writing the files and publishing. A task small
    enough for one Spark task runs on an idle ``resident`` runner if there is one. ``publisher``
    publishes it with the other tasks that finish meanwhile (else it publishes alone).
    """
    spec, io, tuning = request.spec, request.spec.spec.io_config, request.spec.spec.tuning_config
    step = STEP_COSTS.step
    with step("task.plan"):
        properties = _consumer_properties(request)
        splits = plan_splits(request.start_offsets, request.end_offsets, default_parallelism(spark),
                             request.min_split_records if not request.read_to_end else 2**62)
        payload = _task_payload(request, properties, splits)
        logger.info("task %s: indexing %s from %s [%s -> %s] in %d splits", request.task_id, spec.datasource,
                    io.topic or io.topic_pattern, request.start_offsets.to_json(), request.end_offsets.to_json(),
                    len(splits))
    started = time.monotonic()
    results = _index_splits(spark, request, payload, splits, stop, resident)
    index_seconds = time.monotonic() - started
    if request.read_to_end:
        request = replace(request, end_offsets=_read_ends(request, payload, results))

    with step("task.results"):
        records = sum(r.records for r in results)
        unparseable = sum(r.unparseable for r in results)
        samples = tuple(s for r in results for s in r.bad_samples)
        _require_parse_budget(request, unparseable, samples)
        columns = recorded_columns(spec)
        segments = tuple(s.descriptor(spec.datasource, columns) for r in results for s in r.segments)
    with step("task.check_topic"):
        _check_before_publishing(request, stop, before_publish)
        topic_ids = partition_topic_ids(properties, io.topic, request.start_offsets,
                                        partial(shared_topic_ids, looked_after=started + index_seconds))

    started = time.monotonic()
    with step("task.publish"):
        outcome = _publish(engine, request, segments, topic_ids, publisher)
    report = TaskReport(
        task_id=request.task_id, datasource=spec.datasource, start_offsets=request.start_offsets,
        end_offsets=request.end_offsets, records=records, rows_out=sum(r.rows_out for r in results),
        unparseable=unparseable, thrown_away=sum(r.thrown_away for r in results), segments=segments,
        bad_samples=samples[:max(tuning.max_saved_parse_exceptions, 5)], outcome=outcome,
        index_seconds=index_seconds, publish_seconds=time.monotonic() - started,
        dimensions=widest_types(r.dimensions for r in results), high_watermarks=_high_watermarks(payload, results))
    logger.info("task %s: %d records -> %d rows in %d segments, %d unparseable, publish %s: %s",
                request.task_id, records, report.rows_out, len(segments), unparseable,
                outcome.status, outcome.message)
    return report


def _consumer_properties(request: IndexTaskRequest) -> dict[str, Any]:
    """The spec's consumer properties, resolved, with the request's bootstrap servers unless they give some."""
    properties = resolved_consumer_properties(request.spec.spec.io_config.consumer_properties)
    if request.bootstrap_servers and "bootstrap.servers" not in properties:
        properties["bootstrap.servers"] = request.bootstrap_servers
    return properties


def _task_payload(request: IndexTaskRequest, properties: Mapping[str, Any], splits: list[Split]) -> TaskPayload:
    """What the workers need to index ``splits``."""
    spec = request.spec
    data_schema, io, tuning = spec.spec.data_schema, spec.spec.io_config, spec.spec.tuning_config
    return TaskPayload(
        task_id=request.task_id, datasource=spec.datasource, topic=io.topic,
        consumer_config=consumer_config(properties, f"overlord-{spec.datasource}"),
        rollup_schema=_rollup_schema(data_schema, io.input_format),
        deep_storage=request.deep_storage, segment_cache=request.segment_cache,
        generation=request.generation,
        storage_options=dict(request.storage_options), max_rows_in_memory=tuning.max_rows_in_memory,
        max_rows_per_segment=tuning.max_rows_per_segment, splits=tuple(splits),
        min_time=request.min_time, max_time=request.max_time, read_to_end=request.read_to_end,
    )


def _rollup_schema(data_schema: DataSchemaSpec, input_format: InputFormatSpec | None) -> RollupSchema:
    """The rollup schema of a spec's parts, made once per spec (~0.1 ms a task otherwise; specs are immutable).

    A spec that holds a mapping (a schema registry's settings) cannot be a cache key: made each time.
    """
    try:
        return _cached_rollup_schema(data_schema, input_format)
    except TypeError as exc:
        if "unhashable" not in str(exc):
            raise
        return RollupSchema.from_spec(data_schema, input_format)


@functools.lru_cache(maxsize=1024)
def _cached_rollup_schema(data_schema: DataSchemaSpec, input_format: InputFormatSpec | None) -> RollupSchema:
    return RollupSchema.from_spec(data_schema, input_format)


def _index_splits(spark: SparkSession, request: IndexTaskRequest, payload: TaskPayload, splits: list[Split],
                stop: threading.Event | None, resident: ResidentRunners | None) -> list[WorkerResult]:
    """Index ``splits``: on an idle ``resident`` runner if one Spark task would do and one comes, else as a job."""
    results: list[WorkerResult] | None = None
    tasks = 1 if request.read_to_end else spark_tasks(splits, request.min_split_records)  # its ends are caps
    if splits and resident is not None and tasks == 1:
        with STEP_COSTS.step("task.resident_round_trip"):
            results = resident.run(payload, range(len(splits)), stop)  # None: no runner came back in time
    if results is None and splits:
        with STEP_COSTS.step("task.spark_job"):
            spark.sparkContext.setJobGroup(request.task_id, f"indexing task {request.task_id}", interruptOnCancel=True)
            use_pool(spark, INGEST_POOL)
            spark.sparkContext.setJobDescription(f"index {request.spec.datasource} task {request.task_id}")
            results = run_on_workers(spark, len(splits), partial(run_splits, payload), tasks)
    return results or []


def _require_parse_budget(request: IndexTaskRequest, unparseable: int, samples: tuple[Mapping[str, Any], ...]) -> None:
    """:class:`TooManyParseErrors` if the task met more unparseable records than ``maxParseExceptions``."""
    limit = request.spec.spec.tuning_config.max_parse_exceptions
    if limit is not None and unparseable > limit:
        raise TooManyParseErrors(
            f"task {request.task_id}: {unparseable} unparseable records, maxParseExceptions is {limit}; "
            f"first: {samples[:3]}")


def _check_before_publishing(request: IndexTaskRequest, stop: threading.Event | None,
                             before_publish: BeforePublish | None) -> None:
    """Run ``before_publish``, then raise instead of publishing once ``stop`` is set."""
    if before_publish is not None:
        before_publish(request)
    if stop is not None and stop.is_set():
        raise TaskStopped(f"task {request.task_id} was stopped before publishing; nothing was published")


def _publish(engine: sa.Engine, request: IndexTaskRequest, segments: tuple[SegmentDescriptor, ...],
             topic_ids: Mapping[Partition, str], publisher: GroupCommit | None) -> PublishOutcome:
    """Publish ``segments`` and the request's end offsets in one transaction.

    ``topic_ids``, the broker's after the read, must be those recorded when the offsets were
    committed: a topic re-created before or while the task read it has a new ID, and what the
    task read may be the new topic's records under the old topic's offsets.
    """
    publication = PublishRequest(
        datasource=request.spec.datasource, topic=request.spec.spec.io_config.stream, task_id=request.task_id,
        start_offsets=request.start_offsets, end_offsets=request.end_offsets,
        initial_offsets=request.initial_offsets, segments=segments, epoch=request.epoch,
        leader_epoch=request.leader_epoch, topic_ids=topic_ids)
    storage = DeepStorage(request.deep_storage, dict(request.storage_options))
    return publisher.publish(publication, storage) if publisher is not None else publish(engine, publication, storage)
