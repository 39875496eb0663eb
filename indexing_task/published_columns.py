"""What a datasource's published columns mean, as its segments record it, and the spec that must keep it.

Each segment descriptor records the metrics (Druid JSON) and dimensions of the spec its rows were
written with (``columns``). A spec that compacts them, or indexes more rows beside them, must not
give a published column another meaning (:func:`specs.check_columns`), stored supervisor spec or not.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa

from segment_store import SegmentRecord
from segment_store.timeline import visible_segments
from specs import SupervisorSpec, check_columns
from specs.data_schema import DimensionSpec, MetricSpec

__all__ = ["COLUMNS", "check_against_segments", "recorded_columns"]

COLUMNS = "columns"
"""The descriptor key of what a segment's columns mean."""


def recorded_columns(spec: SupervisorSpec) -> dict[str, Any]:
    """What a segment descriptor records of the spec its rows were written with."""
    schema = spec.spec.data_schema
    return {"metrics": [m.model_dump(by_alias=True) for m in schema.metrics_spec],
            "dimensions": [d.model_dump(by_alias=True) for d in schema.dimensions_spec.dimensions]}


def check_segments(segments: Iterable[SegmentRecord], spec: SupervisorSpec) -> None:
    """Refuse ``spec`` (:class:`specs.SpecError`) if it changes what a column of ``segments`` means."""
    recorded = {json.dumps(seg.descriptor[COLUMNS], sort_keys=True): seg.created_at
                for seg in sorted(segments, key=lambda s: s.created_at) if COLUMNS in seg.descriptor}
    metrics: dict[str, MetricSpec] = {}
    dimensions: dict[str, DimensionSpec] = {}
    for text in sorted(recorded, key=recorded.__getitem__):  # oldest first: newer definitions win
        columns = json.loads(text)
        metrics.update((m.name, m) for m in map(MetricSpec.model_validate, columns["metrics"]))
        dimensions.update((d.name, d) for d in map(DimensionSpec.model_validate, columns["dimensions"]))
    check_columns(metrics, dimensions, spec)


def check_against_segments(engine: sa.Engine, spec: SupervisorSpec) -> None:
    """:func:`check_segments` over the datasource's visible segments."""
    check_segments(visible_segments(engine, spec.datasource), spec)
