"""The operator's console: the page at ``/``, its assets and the JSON call it polls.

The script and stylesheet are bundled in the package (no CDN: it works offline). The page is
static; a small script without a framework (``console/console.js``) polls
``GET /console/api/overview`` and a page of ``GET /console/api/tasks`` every 2 s, redraws its
tables and SVG charts in place, and sends every action to the same Druid API other clients use, so
the console can do nothing the API does not allow (authentication included: the browser's Basic
credentials go with every call).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse, Response

from overlord.coordinator.duties import Coordinator
from overlord.coordinator.retention import Rule
from overlord.http.replies import Replies
from overlord.http.service import service_health
from overlord.http.status_payloads import status_payload
from overlord.http.views import task_view
from overlord.overlord_errors import NotFound
from overlord.query.process import QueryProcess
from segment_store import visible_by_interval
from segment_store.timeline import datasources, read_segments

__all__ = ["console_routes"]

ASSETS = Path(__file__).parent / "console"
_MEDIA_TYPES = {"console.js": "text/javascript", "console.css": "text/css"}
MAX_INTERVALS = 48
"""Newest intervals shown per datasource."""
TASK_PAGE = 50
"""Tasks per page of the console's task list."""
MAX_SINCE_S = 100 * 366 * 86_400
"""The task list's ``sinceSeconds`` at most: a century back holds every task; far more is before year 1."""


def console_routes(out: Replies, queries: QueryProcess, coordinator: Coordinator) -> APIRouter:
    """``/``, ``/console/{asset}``, ``/console/api/overview`` and ``/console/api/tasks``."""
    overlord = out.overlord
    router = APIRouter()

    @router.get("/", tags=["console"], summary="The console (HTML)", response_class=FileResponse)
    def page() -> Response:
        return FileResponse(ASSETS / "index.html", media_type="text/html")

    @router.get("/console/{asset}", tags=["console"], summary="The console's script and stylesheet",
                response_class=FileResponse)
    def asset(asset: str) -> Response:
        if asset not in _MEDIA_TYPES:
            raise NotFound(f"no console asset {asset!r}")
        return FileResponse(ASSETS / asset, media_type=_MEDIA_TYPES[asset])

    @router.get("/console/api/overview", tags=["console"], summary="Everything the console shows, in one answer")
    def overview(request: Request) -> Response:
        now = time.time()
        supervisors = [{**status_payload(sup.status), "series": sup.series.as_json(now)}
                       for sup in sorted(overlord.supervisors.values(), key=lambda sup: sup.id)]
        names = sorted({s["payload"]["dataSource"] for s in supervisors} | set(datasources(overlord.engine)))
        rules = coordinator.rules()
        role = request.scope.get("role", "write")  # authentication off: anyone may change anything
        return out.reply({"leader": overlord.leading, "role": role, "health": service_health(overlord, queries),
                          "supervisors": supervisors,
                          "datasources": [_datasource(coordinator, name, rules.get(name, [])) for name in names]})

    @router.get("/console/api/tasks", tags=["console"], summary="A page of tasks, newest first, with their reports")
    def task_page(datasource: str | None = None, status: Literal["RUNNING", "SUCCESS", "FAILED"] | None = None,
                  task_type: Annotated[Literal["index_kafka", "compact"] | None, Query(alias="type")] = None,
                  since_s: Annotated[int | None, Query(alias="sinceSeconds", ge=1, le=MAX_SINCE_S)] = None,
                  page: Annotated[int, Query(ge=0, le=10_000)] = 0) -> Response:
        since = None if since_s is None else datetime.now(UTC) - timedelta(seconds=since_s)
        found = overlord.store.tasks(status=status, datasource=datasource or None, task_type=task_type, since=since,
                                     limit=TASK_PAGE + 1, offset=page * TASK_PAGE)
        active = {task.id for status in out.supervisors() for task in status.active_tasks}
        return out.reply({"tasks": [{**task_view(t, active), "report": t.report} for t in found[:TASK_PAGE]],
                          "page": page, "more": len(found) > TASK_PAGE})

    return router


def _datasource(coordinator: Coordinator, name: str, rules: list[Rule]) -> dict[str, Any]:
    """Visible segments by interval (newest first), the compaction state and the retention rules of one datasource."""
    with coordinator.engine.connect() as conn:
        by_interval = visible_by_interval(read_segments(conn, name))
    compaction = coordinator.compaction_status(name)
    state = {i["interval"]: i for i in compaction.pop("intervals")}
    intervals = [{"interval": (key := f"{start.isoformat()}/{end.isoformat()}"), "segments": len(segs),
                  "rows": sum(s.num_rows for s in segs), "bytes": sum(s.size_bytes for s in segs),
                  "version": segs[0].version, "settled": state.get(key, {}).get("settled", False),
                  "awaitingCompaction": state.get(key, {}).get("awaitingCompaction", 0)}
                 for (start, end), segs in sorted(by_interval.items(), reverse=True)]
    return {"name": name, "intervals": intervals[:MAX_INTERVALS], "intervalCount": len(intervals),
            "segmentCount": sum(i["segments"] for i in intervals), "rows": sum(i["rows"] for i in intervals),
            "compaction": compaction, "rules": [r.model_dump(by_alias=True, exclude_none=True) for r in rules]}
