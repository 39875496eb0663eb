"""Druid's coordinator calls: auto-compaction configs, retention rules, and dropping or restoring segments.

Under ``/druid/coordinator/v1``: ``config/compaction``, ``rules/{dataSource}`` and
``datasources/{dataSource}`` (``markUnused``, ``markUsed``, ``DELETE`` a datasource, one segment
by id). Dropping marks segments unused: queries and compaction stop seeing them at once, and
the kill duty deletes them after ``OVERLORD_KILL_UNUSED_AFTER_S`` (until then they can be marked
used again).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Query
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from overlord.http.replies import Replies
from overlord.overlord_errors import NotFound
from overlord.supervisor.auto_compaction import CompactionConfig
from overlord.supervisor.retention import DEFAULT_RULES_KEY, Rule
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


def coordinator_routes(out: Replies) -> APIRouter:
    """Compaction configs, retention rules, and marking segments unused or used."""
    overlord, reply = out.overlord, out.reply
    router = APIRouter()

    @router.post(PREFIX, tags=["compaction"], summary="Set a datasource's auto-compaction config")
    def set_config(config: CompactionConfig) -> Response:
        overlord.set_compaction_config(config)
        return reply({"dataSource": config.data_source, "ignoredFields": config.ignored_fields})

    @router.get(PREFIX, tags=["compaction"], summary="Every auto-compaction config")
    def configs() -> Response:
        return reply({"compactionConfigs": overlord.store.compaction_configs()})

    @router.get(f"{PREFIX}/{{datasource}}", tags=["compaction"], summary="A datasource's auto-compaction config")
    def config(datasource: str) -> Response:
        found = [c for c in overlord.store.compaction_configs() if c["dataSource"] == datasource]
        if not found:
            raise NotFound(f"no compaction config for {datasource!r}")
        return reply(found[0])

    @router.delete(f"{PREFIX}/{{datasource}}", tags=["compaction"], summary="Stop auto-compacting a datasource")
    def delete(datasource: str) -> Response:
        if not overlord.store.delete_compaction_config(datasource):
            raise NotFound(f"no compaction config for {datasource!r}")
        return reply({"dataSource": datasource})

    @router.get("/druid/coordinator/v1/compaction/status", tags=["compaction"],
                summary="Compaction state per datasource: config, last and next run, segments awaiting per interval")
    def compaction_status(data_source: Annotated[str | None, Query(alias="dataSource")] = None) -> Response:
        names = [data_source] if data_source else sorted(set(overlord.compaction_configs()) | set(
            datasources(overlord.engine)))
        return reply({"latestStatus": [overlord.compaction_status(name) for name in names]})

    def dumped(rules: list[Rule]) -> list[dict[str, object]]:
        return [r.model_dump(by_alias=True, exclude_none=True) for r in rules]

    @router.get(RULES, tags=["retention"], summary="Every datasource's retention rules, and _default")
    def all_rules() -> Response:
        return reply({name: dumped(rules) for name, rules in overlord.rules().items()})

    @router.get(f"{RULES}/{{datasource}}", tags=["retention"], summary="A datasource's retention rules")
    def rules(datasource: str, full: str | None = None) -> Response:
        found = overlord.rules()
        own = found.get(datasource, [])
        with_default = full is not None and datasource != DEFAULT_RULES_KEY  # Druid's ?full
        return reply(dumped(own + found[DEFAULT_RULES_KEY] if with_default else own))

    @router.post(f"{RULES}/{{datasource}}", tags=["retention"], summary="Set a datasource's retention rules")
    def set_rules(datasource: str, rules: Annotated[list[Rule], Body(max_length=MAX_RULES)]) -> Response:
        overlord.set_rules(datasource, rules)
        return reply({"dataSource": datasource, "rules": len(rules)})

    def marked(datasource: str, used: bool, choice: SegmentChoice | None = None) -> Response:
        interval = parse_utc_interval(choice.interval) if choice and choice.interval else None
        ids = overlord.mark(datasource, used, interval, choice.segment_ids if choice else None)
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
