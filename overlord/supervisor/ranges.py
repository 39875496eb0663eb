"""Run one indexing task by hand: from the committed offsets to the current end of the topic."""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa
from pyspark.sql import SparkSession

from indexing_task.task import IndexTaskRequest, TaskReport, run_index_task
from indexing_task.watermarks import topic_watermarks
from overlord.config import Settings
from segment_store import committed_offsets

__all__ = ["next_task_request", "index_once"]


def next_task_request(engine: sa.Engine, settings: Settings, spec: Any, task_id: str | None = None
                      ) -> IndexTaskRequest:
    """The task that would index everything from the committed offsets to the latest offsets.

    A partition without a committed offset starts at its earliest offset if the spec says
    ``useEarliestOffset``, else at its latest (Druid's rule).
    """
    io = spec.spec.io_config
    properties = dict(io.consumer_properties)
    if settings.kafka_bootstrap_servers and "bootstrap.servers" not in properties:
        properties["bootstrap.servers"] = settings.kafka_bootstrap_servers
    marks = topic_watermarks(properties, io.topic)
    initial = {p: (low if io.use_earliest_offset else high) for p, (low, high) in marks.items()}
    stored = committed_offsets(engine, spec.datasource)
    known = stored.offsets if stored is not None and stored.topic == io.topic else {}
    start = {p: known.get(p, initial[p]) for p in marks}
    end = {p: max(start[p], marks[p][1]) for p in marks}
    return IndexTaskRequest(
        task_id=task_id or f"index_{spec.datasource}_{uuid.uuid4().hex[:8]}", spec=spec,
        start_offsets=start, end_offsets=end, initial_offsets=initial,
        deep_storage=settings.deep_storage, generation=stored.version if stored is not None else 0,
        bootstrap_servers=settings.kafka_bootstrap_servers)


def index_once(spark: SparkSession, engine: sa.Engine, settings: Settings, spec: Any) -> TaskReport:
    """Index a datasource once, up to the end of its topic as it is now, and publish."""
    return run_index_task(spark, engine, next_task_request(engine, settings, spec))
