"""Segment metadata store: the publish transaction, committed offsets, segment rows, deep storage."""

from segment_store.deep_storage import DeepStorage, segment_file_path
from segment_store.descriptors import SegmentDescriptor
from segment_store.errors import SegmentStoreError
from segment_store.publish import (
    CommittedOffsets,
    PublishOutcome,
    PublishRequest,
    SegmentRecord,
    committed_offsets,
    publish,
    reset_offsets,
    used_segments,
)
from segment_store.schema import create_schema

__all__ = [
    "CommittedOffsets",
    "DeepStorage",
    "PublishOutcome",
    "PublishRequest",
    "SegmentDescriptor",
    "SegmentRecord",
    "SegmentStoreError",
    "committed_offsets",
    "create_schema",
    "publish",
    "reset_offsets",
    "segment_file_path",
    "used_segments",
]
