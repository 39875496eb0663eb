"""Druid's task calls under ``/druid/indexer/v1``: listing, status, payload and shutdown."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.responses import Response

from overlord.errors import NotFound
from overlord.http.replies import Replies
from overlord.http.supervisors import PREFIX
from overlord.http.views import task_view
from overlord.supervisor.metadata_store import TaskRecord

__all__ = ["task_routes"]


def task_routes(out: Replies) -> APIRouter:
    """Tasks, newest first; one task's payload and status; stopping a task."""
    overlord, reply, supervisors = out.overlord, out.reply, out.supervisors
    router = APIRouter()

    def active_ids() -> set[str]:
        return {task.id for status in supervisors() for task in status.active_tasks}

    @router.get(f"{PREFIX}/tasks", tags=["tasks"], summary="Tasks, newest first")
    def list_tasks(state: Literal["running", "complete", "success", "failed", "waiting", "pending"] | None = None,
                   datasource: str | None = None,
                   limit: Annotated[int, Query(alias="max", ge=1, le=10_000)] = 200) -> Response:
        store, found = overlord.store, list[TaskRecord]()
        if state in (None, "running", "success", "failed"):
            found = store.tasks(status=state, datasource=datasource, limit=limit)
        elif state == "complete":
            found = sorted(store.tasks(status="SUCCESS", datasource=datasource, limit=limit)
                           + store.tasks(status="FAILED", datasource=datasource, limit=limit),
                           key=lambda t: t.created_at, reverse=True)[:limit]
        active = active_ids()  # waiting/pending: tasks start at once here, so there are none
        return reply([task_view(t, active) for t in found])

    def task_record(task_id: str) -> TaskRecord:
        record = overlord.store.task(task_id)
        if record is None:
            raise NotFound(f"no task {task_id!r}")
        return record

    @router.get(f"{PREFIX}/task/{{task_id}}", tags=["tasks"], summary="A task's ranges and report")
    def get_task(task_id: str) -> Response:
        t = task_record(task_id)
        return reply({"task": task_id, "payload": {
            "id": t.id, "type": t.type, "dataSource": t.datasource, "supervisorId": t.supervisor_id,
            "startOffsets": t.start_offsets.to_json(), "endOffsets": t.end_offsets.to_json(), "report": t.report}})

    @router.get(f"{PREFIX}/task/{{task_id}}/status", tags=["tasks"], summary="A task's status")
    def get_task_status(task_id: str) -> Response:
        return reply({"task": task_id, "status": task_view(task_record(task_id), active_ids())})

    @router.post(f"{PREFIX}/task/{{task_id}}/shutdown", tags=["tasks"], summary="Stop a task; it will not publish")
    def shutdown_task(task_id: str) -> Response:
        overlord.shutdown_task(task_id)
        return reply({"task": task_id})

    return router
