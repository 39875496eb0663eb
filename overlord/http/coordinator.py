"""Druid's coordinator calls for auto-compaction configs under ``/druid/coordinator/v1/config/compaction``."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from overlord.errors import NotFound
from overlord.http.replies import Replies
from overlord.supervisor.auto_compaction import CompactionConfig

__all__ = ["coordinator_routes"]

PREFIX = "/druid/coordinator/v1/config/compaction"


def coordinator_routes(out: Replies) -> APIRouter:
    """Set, list, show and delete per-datasource compaction configs."""
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

    return router
