"""Druid's coordinator calls: compaction (now, and its configs), retention rules, dropping or restoring segments.

``POST /druid/indexer/v1/compact/{dataSource}`` compacts now, as a task. Under
``/druid/coordinator/v1``: ``config/compaction``, ``rules/{dataSource}`` and ``datasources/{dataSource}``
(``markUnused``, ``markUsed``, ``DELETE`` a datasource, one segment by id). Dropping marks segments
unused: queries and compaction stop seeing them at once, and the kill duty deletes them after
``OVERLORD_KILL_UNUSED_AFTER_S`` (until then they can be marked used again).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from indexing_task.compaction_job import CompactionReport
from overlord.coordinator.auto_compaction import CompactionConfig
from overlord.coordinator.duties import Coordinator
from overlord.coordinator.retention import DEFAULT_RULES_KEY, Rule
from overlord.http.replies import Replies
from overlord.overlord_errors import NotFound
from overlord.query.query_errors import QueryError
from segment_store import datasources
from specs.durations import parse_utc_interval

__all__ = ["coordinator_routes"]

PREFIX = "/druid/coordinator/v1/config/compaction"
RULES = "/druid/coordinator/v1/rules"
DATASOURCES = "/druid/coordinator/v1/datasources"
MAX_RULES = 100
"""The most retention rules one datasource may have (each is tried against every interval every minute)."""


class SegmentChoice(BaseModel):
    """Druid's ``markUnused``/``markUsed`` body: an interval, or segment ids."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    interval: str | None = None
    segment_ids: list[str] | None = Field(default=None, alias="segmentIds", min_length=1)

    @field_validator("interval")
    @classmethod
    def _interval(cls, value: str | None) -> str | None:
        if value is not None:
            parse_utc_interval(value)
        return value

    @model_validator(mode="after")
    def _one_of(self) -> SegmentChoice:
        if (self.interval is None) == (self.segment_ids is None):
            raise ValueError('expected either "interval" or "segmentIds"')
        return self


class CompactRequest(BaseModel):
    """Body of ``POST /druid/indexer/v1/compact/{datasource}`` (all optional)."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")
    interval: str | None = Field(default=None, description="START/END in ISO-8601 (UTC); all intervals if absent")
    max_rows_per_segment: int | None = Field(default=None, ge=1, alias="maxRowsPerSegment")


def _compact_interval(text: str) -> tuple[datetime, datetime]:
    try:
        return parse_utc_interval(text)
    except ValueError as exc:
        raise QueryError(f"interval: {exc}", "INVALID_INTERVAL") from None


def _report(r: CompactionReport) -> dict[str, Any]:
    outcome = r.outcome
    return {"interval": f"{r.interval_start.isoformat()}/{r.interval_end.isoformat()}",
            "inputSegments": r.input_segments, "inputRows": r.input_rows,
            "outputSegments": len(r.output_segments), "outputRows": r.output_rows,
            "status": outcome.status, "message": outcome.message, "version": outcome.version,
            "carriedOver": len(outcome.carried_over), "seconds": round(r.seconds, 3)}



def coordinator_routes(out: Replies, coordinator: Coordinator) -> APIRouter:
    """Compaction now and its configs, retention rules, and marking segments unused or used."""
    reply = out.reply
    router = APIRouter()

    @router.post("/druid/indexer/v1/compact/{datasource}", tags=["compaction"],
              summary="Compact a datasource's intervals now, as a task (answers when it has finished)")
    def compact_datasource(datasource: str, body: CompactRequest | None = None) -> Response:
        body = body or CompactRequest()
        task_id, done = coordinator.compact(datasource, _compact_interval(body.interval) if body.interval else None,
                                            body.max_rows_per_segment)
        reports = done.result()
        return JSONResponse({"task": task_id, "dataSource": datasource, "intervals": [_report(r) for r in reports]})



    @router.post(PREFIX, tags=["compaction"], summary="Set a datasource's auto-compaction config")
    def set_config(config: CompactionConfig) -> Response:
        coordinator.set_compaction_config(config)
        return reply({"dataSource": config.data_source, "ignoredFields": config.ignored_fields})

    @router.get(PREFIX, tags=["compaction"], summary="Every auto-compaction config")
    def configs() -> Response:
        return reply({"compactionConfigs": coordinator.store.compaction_configs()})

    @router.get(f"{PREFIX}/{{datasource}}", tags=["compaction"], summary="A datasource's auto-compaction config")
    def config(datasource: str) -> Response:
        found = [c for c in coordinator.store.compaction_configs() if c["dataSource"] == datasource]
        if not found:
            raise NotFound(f"no compaction config for {datasource!r}")
        return reply(found[0])

    @router.delete(f"{PREFIX}/{{datasource}}", tags=["compaction"], summary="Stop auto-compacting a datasource")
    def delete(datasource: str) -> Response:
        if not coordinator.store.delete_compaction_config(datasource):
            raise NotFound(f"no compaction config for {datasource!r}")
        return reply({"dataSource": datasource})

    @router.get("/druid/coordinator/v1/compaction/status", tags=["compaction"],
                summary="Compaction state per datasource: config, last and next run, segments awaiting per interval")
    def compaction_status(data_source: Annotated[str | None, Query(alias="dataSource")] = None) -> Response:
        names = [data_source] if data_source else sorted(set(coordinator.compaction_configs()) | set(
            datasources(coordinator.engine)))
        return reply({"latestStatus": [coordinator.compaction_status(name) for name in names]})

    def dumped(rules: list[Rule]) -> list[dict[str, object]]:
        return [r.model_dump(by_alias=True, exclude_none=True) for r in rules]

    @router.get(RULES, tags=["retention"], summary="Every datasource's retention rules, and _default")
    def all_rules() -> Response:
        return reply({name: dumped(rules) for name, rules in coordinator.rules().items()})

    @router.get(f"{RULES}/{{datasource}}", tags=["retention"], summary="A datasource's retention rules")
    def rules(datasource: str, full: str | None = None) -> Response:
        found = coordinator.rules()
        own = found.get(datasource, [])
        with_default = full is not None and datasource != DEFAULT_RULES_KEY  # Druid's ?full
        return reply(dumped(own + found[DEFAULT_RULES_KEY] if with_default else own))

    @router.post(f"{RULES}/{{datasource}}", tags=["retention"], summary="Set a datasource's retention rules")
    def set_rules(datasource: str, rules: Annotated[list[Rule], Body(max_length=MAX_RULES)]) -> Response:
        coordinator.set_rules(datasource, rules)
        return reply({"dataSource": datasource, "rules": len(rules)})

    def marked(datasource: str, used: bool, choice: SegmentChoice | None = None) -> Response:
        interval = parse_utc_interval(choice.interval) if choice and choice.interval else None
        ids = coordinator.mark(datasource, used, interval, choice.segment_ids if choice else None)
        return reply({"numChangedSegments": len(ids)})

    @router.post(f"{DATASOURCES}/{{datasource}}/markUnused", tags=["retention"],
                 summary="Drop a datasource's segments in an interval, or by id (marks them unused)")
    def mark_unused(datasource: str, choice: SegmentChoice) -> Response:
        return marked(datasource, False, choice)

    @router.post(f"{DATASOURCES}/{{datasource}}/markUsed", tags=["retention"],
                 summary="Restore dropped segments in an interval, or by id (until they are killed)")
    def mark_used(datasource: str, choice: SegmentChoice) -> Response:
        return marked(datasource, True, choice)

    @router.delete(f"{DATASOURCES}/{{datasource}}", tags=["retention"],
                   summary="Drop a whole datasource (marks every segment unused; ingestion goes on)")
    def drop_datasource(datasource: str) -> Response:
        return marked(datasource, False)

    @router.post(f"{DATASOURCES}/{{datasource}}", tags=["retention"],
                 summary="Restore a dropped datasource (until its segments are killed)")
    def restore_datasource(datasource: str) -> Response:
        return marked(datasource, True)

    @router.delete(f"{DATASOURCES}/{{datasource}}/segments/{{segment_id}}", tags=["retention"],
                   summary="Drop one segment")
    def drop_segment(datasource: str, segment_id: str) -> Response:
        return marked(datasource, False, SegmentChoice(segmentIds=[segment_id]))

    @router.post(f"{DATASOURCES}/{{datasource}}/segments/{{segment_id}}", tags=["retention"],
                 summary="Restore one segment")
    def restore_segment(datasource: str, segment_id: str) -> Response:
        return marked(datasource, True, SegmentChoice(segmentIds=[segment_id]))

    return router
