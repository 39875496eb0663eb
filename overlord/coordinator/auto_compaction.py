"""Auto-compaction: Druid's per-datasource compaction configs, and what the leader's duty merges with them.

A config (Druid's ``/druid/coordinator/v1/config/compaction`` shape) names a datasource, how
recent an interval may be and still be left alone by full compaction (``skipOffsetFromLatest``,
counted back from the end of the datasource's newest interval) and the rows per compacted
segment. Every datasource with a supervisor and no config of its own gets
:func:`default_config` (unless ``OVERLORD_AUTO_COMPACTION`` is off). Every
``OVERLORD_COMPACTION_PERIOD_S`` the leader runs, per datasource, one compaction task that merges
what :func:`segments_to_merge` picks in each interval:

* a *settled* interval (older than the skip offset) is compacted whole, once: afterwards it holds
  the output of one whole-interval compaction until late records are appended to it;
* a *fresh* interval is tiered, as a size-tiered LSM tree is: segments fall into tiers by size
  (each ``TIER_FAN_IN`` times the one below), and a tier holding ``TIER_FAN_IN`` segments or more
  is merged into one. A steady stream of small task outputs thus keeps a handful of segments
  per tier and rewrites each row about log(interval size / task output size) times.

The swap transaction keeps concurrent appends visible and counted once, as for compactions
asked for by hand.

Fields that would change the data (granularity, dimensions, metrics, transforms) are refused:
compaction keeps the datasource's own schema. Fields that only tune Druid's task scheduling
(``taskPriority``, ``inputSegmentSizeBytes``, ``taskContext``, ``engine``) are accepted and
listed as ignored.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from segment_store import SegmentRecord
from segment_store.timeline import Interval
from specs import SpecError
from specs.durations import parse_iso_duration

__all__ = ["CompactionConfig", "default_config", "merge_selection", "segments_to_merge"]

TIER_FAN_IN = 8
"""Size ratio between tiers, and how many segments of one tier are merged together."""
TIER_BASE_BYTES = 64 * 1024
"""Segments smaller than ``TIER_BASE_BYTES * TIER_FAN_IN`` are all in the first tier."""
DEFAULT_SKIP = "PT1H"
"""The default config's ``skipOffsetFromLatest``: intervals an hour older than the newest are compacted whole."""

_IGNORED = ("taskPriority", "inputSegmentSizeBytes", "taskContext", "engine")


class _PartitionsSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    type: str = "dynamic"
    max_rows_per_segment: int | None = Field(default=None, ge=1, alias="maxRowsPerSegment")
    max_total_rows: int | None = Field(default=None, ge=1, alias="maxTotalRows")

    @field_validator("type")
    @classmethod
    def _dynamic(cls, value: str) -> str:
        if value != "dynamic":
            raise ValueError(f"only dynamic partitioning (by row count) is supported, got {value!r}")
        return value


class _TuningConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    type: str | None = None
    partitions_spec: _PartitionsSpec | None = Field(default=None, alias="partitionsSpec")


class CompactionConfig(BaseModel):
    """One datasource's auto-compaction config."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    data_source: str = Field(alias="dataSource", min_length=1)
    skip_offset_from_latest: str = Field(default="P1D", alias="skipOffsetFromLatest")
    """Intervals ending within this of the newest interval's end are left alone (Druid's default: P1D)."""
    max_rows_per_segment: int | None = Field(default=None, ge=1, alias="maxRowsPerSegment")
    tuning_config: _TuningConfig | None = Field(default=None, alias="tuningConfig")
    task_priority: int | None = Field(default=None, alias="taskPriority")
    input_segment_size_bytes: int | None = Field(default=None, alias="inputSegmentSizeBytes")
    task_context: dict[str, Any] | None = Field(default=None, alias="taskContext")
    engine: str | None = None
    granularity_spec: Any = Field(default=None, alias="granularitySpec")
    dimensions_spec: Any = Field(default=None, alias="dimensionsSpec")
    metrics_spec: Any = Field(default=None, alias="metricsSpec")
    transform_spec: Any = Field(default=None, alias="transformSpec")
    io_config: Any = Field(default=None, alias="ioConfig")

    @field_validator("skip_offset_from_latest")
    @classmethod
    def _duration(cls, value: str) -> str:
        try:
            parse_iso_duration(value)
        except SpecError as exc:
            raise ValueError(exc.errors[0][1]) from None
        return value

    @field_validator("granularity_spec", "dimensions_spec", "metrics_spec", "transform_spec", "io_config")
    @classmethod
    def _keeps_the_schema(cls, value: Any) -> Any:
        if value is not None:
            raise ValueError("not supported: compaction keeps the datasource's own granularity, dimensions, metrics "
                             "and transforms (change them in the supervisor spec)")
        return value

    @property
    def skip(self) -> timedelta:
        return parse_iso_duration(self.skip_offset_from_latest)

    @property
    def rows_per_segment(self) -> int | None:
        """The rows per compacted segment (None: the supervisor spec's ``maxRowsPerSegment``)."""
        partitions = self.tuning_config.partitions_spec if self.tuning_config else None
        return self.max_rows_per_segment or (partitions.max_rows_per_segment if partitions else None)

    @property
    def ignored_fields(self) -> list[str]:
        """The Druid fields given that do not apply here."""
        given = self.model_dump(by_alias=True, exclude_none=True)
        return [name for name in _IGNORED if name in given]

    def to_druid_json(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)


def default_config(datasource: str) -> CompactionConfig:
    """The config of a datasource that has none of its own."""
    return CompactionConfig(dataSource=datasource, skipOffsetFromLatest=DEFAULT_SKIP)


def _tier(segment: SegmentRecord) -> int:
    return max(0, int(math.log(max(segment.size_bytes, 1) / TIER_BASE_BYTES, TIER_FAN_IN)))


def _whole_compaction(segment: SegmentRecord) -> str | None:
    """The job that wrote ``segment`` as (part of) a whole interval's compaction, if one did."""
    by = segment.descriptor.get("compacted_by") or {}
    return by.get("job_id") if by.get("whole_interval") else None


def segments_to_merge(segments: Sequence[SegmentRecord], *, settled: bool, rows_per_segment: int
                      ) -> list[SegmentRecord]:
    """What the duty merges now of one interval's visible ``segments`` (empty: nothing).

    ``settled``: the interval is older than the skip offset, so it is compacted whole unless it
    already is one segment or one whole-interval compaction's output. Otherwise the segments
    below half of ``rows_per_segment`` rows are tiered and every full tier is merged.
    """
    if settled:
        jobs = {_whole_compaction(s) for s in segments}
        done = len(segments) < 2 or (len(jobs) == 1 and None not in jobs)
        return [] if done else list(segments)
    tiers: dict[int, list[SegmentRecord]] = {}
    for segment in segments:
        if segment.num_rows < rows_per_segment // 2:
            tiers.setdefault(_tier(segment), []).append(segment)
    return [s for tier in tiers.values() if len(tier) >= TIER_FAN_IN for s in tier]


def merge_selection(cutoff: datetime, rows_per_segment: int
                    ) -> Callable[[Interval, list[SegmentRecord]], list[SegmentRecord]]:
    """:func:`segments_to_merge` as a compaction job's selection: intervals ending by ``cutoff`` are settled."""
    return lambda interval, segments: segments_to_merge(segments, settled=interval[1] <= cutoff,
                                                        rows_per_segment=rows_per_segment)
