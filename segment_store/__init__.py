"""Segment metadata store: offsets, the publish transaction, the timeline, compaction swap, cleanup.

Also committed offsets and segment rows as records, and deep storage (fsspec).
"""

from segment_store.cleanup import CleanupReport, cleanup
from segment_store.compaction_swap import CompactionSwap, SwapOutcome, swap_compacted
from segment_store.deep_storage import DeepStorage, segment_file_path
from segment_store.descriptors import SegmentDescriptor
from segment_store.lifecycle import mark_unused, mark_used
from segment_store.migrate import upgrade_schema
from segment_store.offsets import OffsetRange, Offsets, Partition, TopicPartitionId, kafka_partition
from segment_store.publish import PublishOutcome, PublishRequest, publish
from segment_store.records import (
    CommittedOffsets,
    SegmentRecord,
    committed_offsets,
    pin_offsets,
    reset_offsets,
    skip_offsets,
    used_segments,
)
from segment_store.store_errors import SegmentStoreError
from segment_store.timeline import Interval, datasources, visible, visible_by_interval, visible_segments
from segment_store.topic_ids import check_topic_ids

__all__ = [
    "CleanupReport",
    "CommittedOffsets",
    "CompactionSwap",
    "DeepStorage",
    "Interval",
    "OffsetRange",
    "Offsets",
    "Partition",
    "PublishOutcome",
    "PublishRequest",
    "SegmentDescriptor",
    "SegmentRecord",
    "SegmentStoreError",
    "SwapOutcome",
    "TopicPartitionId",
    "check_topic_ids",
    "cleanup",
    "committed_offsets",
    "upgrade_schema",
    "datasources",
    "kafka_partition",
    "mark_unused",
    "mark_used",
    "pin_offsets",
    "publish",
    "reset_offsets",
    "skip_offsets",
    "segment_file_path",
    "swap_compacted",
    "used_segments",
    "visible",
    "visible_by_interval",
    "visible_segments",
]
