"""JSON views of supervisors, their spec history and tasks, in Druid's shapes (before masking)."""

from __future__ import annotations

from typing import Any

from overlord.supervisor.metadata_store import SupervisorRecord, TaskRecord
from overlord.supervisor_status import SupervisorStatus

__all__ = ["history_entry", "list_entry", "spec_view", "task_view"]


def list_entry(status: SupervisorStatus) -> dict[str, Any]:
    """An entry of ``GET /supervisor?state=true`` (``?full`` adds ``spec``)."""
    return {"id": status.id, "state": status.state, "detailedState": status.detailed_state,
            "healthy": status.healthy, "suspended": status.suspended}


def spec_view(status: SupervisorStatus) -> dict[str, Any]:
    """The current spec as Druid JSON, with ``suspended`` as Druid returns it."""
    return {**status.spec.to_druid_json(), "suspended": status.suspended}


def history_entry(record: SupervisorRecord) -> dict[str, Any]:
    """One history row: when it was written (``version``), by whom (``author``; None before release 0.2)."""
    return {"spec": {**record.spec, "suspended": record.suspended}, "version": record.created_at.isoformat(),
            "suspended": record.suspended, "terminated": record.terminated, "author": record.author}


def task_view(record: TaskRecord, active: set[str]) -> dict[str, Any]:
    """Druid's task status object (``duration`` in ms, -1 while running) plus our offsets and detail."""
    finished = record.finished_at
    return {
        "id": record.id, "type": record.type, "createdTime": record.created_at.isoformat(),
        "queueInsertionTime": record.created_at.isoformat(), "statusCode": record.status, "status": record.status,
        "runnerStatusCode": "RUNNING" if record.id in active else "NONE",
        "duration": -1 if finished is None else int((finished - record.created_at).total_seconds() * 1000),
        "location": {"host": None, "port": -1, "tlsPort": -1}, "dataSource": record.datasource,
        "errorMsg": record.status_detail if record.status == "FAILED" else None,
        "supervisorId": record.supervisor_id, "statusDetail": record.status_detail,
        "startOffsets": record.start_offsets.to_json(), "endOffsets": record.end_offsets.to_json()}
