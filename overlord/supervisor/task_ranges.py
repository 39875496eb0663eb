"""What to index next: where partitions start, and the next range of a set of partitions.

One rule for the supervisor and for ``overlord index`` (one task by hand):

* committed offsets of another stream are refused (a reset is needed to switch topics);
  a ``topicPattern`` datasource's offsets name their topics, so its pattern may change;
* on the first run, a partition starts at its earliest offset if the spec says
  ``useEarliestOffset``, else at its latest; a partition that appears later starts at its
  earliest; that start is committed ("pinned") before the first task, so a retried first
  task cannot skip what arrived meanwhile;
* the next range of a partition is ``[committed, latest)``.
"""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

import sqlalchemy as sa
from pyspark.sql import SparkSession

from indexing_task.reader import resolved_consumer_properties
from indexing_task.task import IndexTaskRequest, TaskReport, run_index_task
from indexing_task.watermarks import TopicIdSource, stream_topic_ids, stream_watermarks, topic_id_changes
from overlord.config import Settings
from overlord.overlord_errors import OverlordError
from segment_store import (
    CommittedOffsets,
    OffsetRange,
    Offsets,
    Partition,
    TopicPartitionId,
    committed_offsets,
    pin_offsets,
)
from specs import KafkaIOConfigSpec, SupervisorSpec

__all__ = ["TopicChanged", "WatermarkSource", "committed_for", "consumer_properties", "index_once",
           "next_range", "next_task_request", "pin_initial_offsets", "reads_partition", "starting_offsets",
           "task_group"]

class WatermarkSource(Protocol):
    """``(consumer properties, ioConfig) -> {partition: (low, high)}``: the first and next offset of each partition.

    The lows of ``known_lows`` are taken from it, not asked (:func:`indexing_task.watermarks.stream_watermarks`).
    """

    def __call__(self, consumer_properties: Mapping[str, Any], io: KafkaIOConfigSpec, *,
                 known_lows: Mapping[Partition, int] | None = None) -> Mapping[Partition, tuple[int, int]]: ...


class TopicChanged(OverlordError):
    """The datasource's committed offsets belong to another topic (or to a topicPattern)."""


def consumer_properties(spec: SupervisorSpec, settings: Settings) -> dict[str, Any]:
    """The spec's consumerProperties (secrets resolved), with the overlord's brokers if the spec names none."""
    properties = resolved_consumer_properties(spec.spec.io_config.consumer_properties)
    if settings.kafka_bootstrap_servers and "bootstrap.servers" not in properties:
        properties["bootstrap.servers"] = settings.kafka_bootstrap_servers
    return properties


def committed_for(spec: SupervisorSpec, stored: CommittedOffsets | None) -> Offsets:
    """The committed offsets of the spec's stream; :class:`TopicChanged` if they are another stream's."""
    stream = spec.spec.io_config.stream
    if stored is None or stored.topic in (None, stream):
        return stored.offsets if stored is not None else Offsets()
    raise TopicChanged(f"datasource {spec.datasource!r}: expected committed offsets of {stream!r}, "
                       f"found offsets of {stored.topic!r}; reset the supervisor to read the new topic")


def starting_offsets(spec: SupervisorSpec, watermarks: Mapping[Partition, tuple[int, int]],
                     stored: CommittedOffsets | None) -> Offsets:
    """Where the partitions without a committed offset start.

    On the first run (the offsets row names no stream yet: never pinned, or reset) at the
    earliest or latest offset, per the spec's ``useEarliestOffset``; a partition that appears
    later always at its earliest offset, so what was produced to it before it was seen is not
    skipped (Druid's rule), and so does every partition of a topic a ``topicPattern`` comes to
    match, even when it matched none on the first run.
    """
    committed = committed_for(spec, stored)
    earliest = spec.spec.io_config.use_earliest_offset or (stored is not None and stored.topic is not None)
    return Offsets({p: low if earliest else high for p, (low, high) in watermarks.items() if p not in committed})


def pin_initial_offsets(engine: sa.Engine, spec: SupervisorSpec, watermarks: Mapping[Partition, tuple[int, int]],
                        stored: CommittedOffsets | None) -> CommittedOffsets:
    """Commit where new partitions start, and the stream; return the datasource's offsets row after that.

    ``stored`` is the offsets row as last read. Every partition a task covers then has a
    committed offset and the row names the topic, so a publish never relies on an initial
    offset, and one of another topic is refused.
    """
    new = starting_offsets(spec, watermarks, stored)
    if not new and stored is not None and stored.topic is not None:
        return stored
    return pin_offsets(engine, spec.datasource, spec.spec.io_config.stream, new)


def reads_partition(spec: SupervisorSpec, partition: Partition) -> bool:
    """Whether ``partition`` is one the spec can read: a number of its topic, or one of a topic its pattern matches."""
    io = spec.spec.io_config
    if isinstance(partition, TopicPartitionId):
        return io.topic_pattern is not None and io.reads(partition.topic)
    return io.topic is not None


def task_group(partition: Partition, task_count: int) -> int:
    """The task group that reads a partition: its number modulo ``taskCount``.

    A ``topicPattern`` partition's number is shifted by a stable hash of its topic, so each
    topic's partitions spread over the groups.
    """
    if isinstance(partition, TopicPartitionId):
        return (zlib.crc32(partition.topic.encode()) + partition.partition) % task_count
    return partition % task_count


def next_range(committed: Mapping[Partition, int], latest: Mapping[Partition, int], partitions: Iterable[Partition],
               max_records: int | None = None) -> OffsetRange:
    """``[committed, latest)`` of each partition, at most ``max_records`` offsets in all.

    The cap is shared fairly: partitions with less to read take all of it, the rest split
    what is left evenly. Empty where latest is not past committed.
    """
    start = Offsets({p: committed[p] for p in partitions})
    available = {p: max(0, latest[p] - o) for p, o in start.items()}
    take, left = dict(available), max_records
    if left is not None:
        for i, (p, n) in enumerate(sorted(available.items(), key=lambda kv: kv[1])):
            take[p] = min(n, left // (len(available) - i))
            left -= take[p]
    return OffsetRange(start, Offsets({p: o + take[p] for p, o in start.items()}))


def next_task_request(engine: sa.Engine, settings: Settings, spec: SupervisorSpec, task_id: str | None = None,
                      watermarks: WatermarkSource = stream_watermarks,
                      topic_ids: TopicIdSource = stream_topic_ids) -> IndexTaskRequest:
    """The task that indexes every partition from its committed offset to its latest offset now (no cap).

    Refused (:class:`TopicChanged`) if a partition's topic was re-created since its offsets were pinned.
    """
    properties, io = consumer_properties(spec, settings), spec.spec.io_config
    marks = watermarks(properties, io)
    committed = pin_initial_offsets(engine, spec, marks, committed_offsets(engine, spec.datasource))
    changed = topic_id_changes(engine, spec.datasource, properties, io.topic, marks, topic_ids)
    if changed:
        raise TopicChanged(f"datasource {spec.datasource!r}: partitions {sorted(map(str, changed))} belong to a "
                           "topic re-created since their offsets were committed; reset their offsets to go on")
    todo = next_range(committed.offsets, {p: high for p, (_, high) in marks.items()}, marks)
    min_time, max_time = spec.spec.io_config.message_time_bounds(datetime.now(UTC))
    return IndexTaskRequest(
        task_id=task_id or f"index_{spec.datasource}_{uuid.uuid4().hex[:8]}", spec=spec,
        start_offsets=todo.start, end_offsets=todo.end, initial_offsets=Offsets(),
        deep_storage=settings.deep_storage, segment_cache=settings.publishers_segment_cache,
        generation=committed.version, epoch=committed.epoch,
        bootstrap_servers=settings.kafka_bootstrap_servers, min_time=min_time, max_time=max_time)


def index_once(spark: SparkSession, engine: sa.Engine, settings: Settings, spec: SupervisorSpec) -> TaskReport:
    """Index a datasource once, up to the end of its topic(s) as they are now, and publish."""
    return run_index_task(spark, engine, next_task_request(engine, settings, spec))
