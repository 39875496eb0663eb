"""Druid's task calls under ``/druid/indexer/v1``: listing, status, payload, log, reports and shutdown."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import PlainTextResponse, Response

from overlord.http.replies import Replies
from overlord.http.supervisors import PREFIX
from overlord.http.views import task_view
from overlord.overlord_errors import NotFound
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

    @router.get(f"{PREFIX}/task/{{task_id}}/log", tags=["tasks"], response_class=PlainTextResponse,
                summary="The lines the overlord wrote running the task (live while it runs); offset<0: the end")
    def get_task_log(task_id: str, offset: int = 0) -> Response:
        record = task_record(task_id)
        text = overlord.runner.logs.text(task_id) or overlord.store.task_log(task_id) or ""
        if record.status == "RUNNING" and not text:
            text = "the task has not logged anything yet\n"
        return PlainTextResponse(text[offset:])

    @router.get(f"{PREFIX}/task/{{task_id}}/reports", tags=["tasks"],
                summary="Druid's ingestionStatsAndErrors report: row counts and parse errors")
    def get_task_reports(task_id: str) -> Response:
        return reply(ingestion_report(task_record(task_id)))

    @router.post(f"{PREFIX}/task/{{task_id}}/shutdown", tags=["tasks"], summary="Stop a task; it will not publish")
    def shutdown_task(task_id: str) -> Response:
        overlord.shutdown_task(task_id)
        return reply({"task": task_id})

    return router


def ingestion_report(record: TaskRecord) -> dict[str, Any]:
    """Druid's task report for ``record``: rows processed, unparseable and thrown away, the parse errors sampled."""
    report = record.report or {}
    state = {"RUNNING": "BUILD_SEGMENTS"}.get(record.status, "COMPLETED")
    rows = {"processed": report.get("processed", 0), "processedWithError": 0,
            "unparseable": report.get("unparseable", 0), "thrownAway": report.get("thrownAway", 0)}
    errors = [f"partition {s.get('partition')} offset {s.get('offset')}: {s.get('reason')}"
              for s in report.get("badSamples", [])]
    return {"ingestionStatsAndErrors": {"type": "ingestionStatsAndErrors", "taskId": record.id, "payload": {
        "ingestionState": state, "rowStats": {"buildSegments": rows} if record.report else {},
        "unparseableEvents": {"buildSegments": errors} if record.report else {},
        "errorMsg": record.status_detail if record.status == "FAILED" else None,
        "segmentAvailabilityConfirmed": False, "segmentAvailabilityWaitTimeMs": 0}}}
