"""Value types shared by the indexing task and the metadata store."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = ["SegmentDescriptor"]


@dataclass(frozen=True)
class SegmentDescriptor:
    """One Parquet file written to deep storage, not yet (or already) published.

    ``id`` is derived from the datasource, the interval and the offset range the file was
    built from, so a replica or retry of the same range produces the same id. Version and
    partition number are assigned by the publish transaction, not by the writer.
    """

    id: str
    datasource: str
    interval_start: datetime
    interval_end: datetime
    path: str
    size_bytes: int
    num_rows: int
    details: Mapping[str, Any] = field(default_factory=dict)
    """Free-form JSON stored with the row: columns, min/max time, rows in, offset range."""

    def __post_init__(self) -> None:
        if self.interval_start.tzinfo is None or self.interval_end.tzinfo is None:
            raise ValueError(f"segment {self.id}: interval must be UTC-aware")
        if not self.interval_start < self.interval_end:
            raise ValueError(f"segment {self.id}: empty interval {self.interval_start}/{self.interval_end}")
