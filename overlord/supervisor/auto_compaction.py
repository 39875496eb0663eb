"""Auto-compaction: Druid's per-datasource compaction configs, and the duty the leader runs with them.

A config (Druid's ``/druid/coordinator/v1/config/compaction`` shape) names a datasource, how
recent an interval may be and still be left alone (``skipOffsetFromLatest``, counted back from
the end of the datasource's newest interval) and the rows per compacted segment. Every
``OVERLORD_COMPACTION_PERIOD_S`` the leader compacts, as a compaction task, each older
interval that has more than one visible segment. The swap transaction keeps concurrent
appends visible and counted once, as for compactions asked for by hand.

Fields that would change the data (granularity, dimensions, metrics, transforms) are refused:
compaction keeps the datasource's own schema. Fields that only tune Druid's task scheduling
(``taskPriority``, ``inputSegmentSizeBytes``, ``taskContext``, ``engine``) are accepted and
listed as ignored.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from specs import SpecError
from specs.durations import parse_iso_duration

__all__ = ["CompactionConfig"]

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
