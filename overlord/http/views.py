"""JSON views of supervisors, their spec history and tasks, in Druid's shapes (before masking)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from overlord.supervisor.loop import Supervisor
from overlord.supervisor.metadata_store import SupervisorRecord, TaskRecord

__all__ = ["history_entry", "list_entry", "snapshot", "spec_view", "task_view"]

LOCK_WAIT_S = 2.0
"""How long a status read waits for a supervisor's run to release its lock before reading without it."""
_T = TypeVar("_T")


def snapshot(sup: Supervisor, build: Callable[[Supervisor], _T]) -> _T:
    """``build(sup)`` under the supervisor's lock; if a run holds it past ``LOCK_WAIT_S``, read without it."""
    if sup.lock.acquire(timeout=LOCK_WAIT_S):
        try:
            return build(sup)
        finally:
            sup.lock.release()
    for _ in range(5):
        try:
            return build(sup)
        except RuntimeError:  # a dict changed size while the run loop updated it; read again
            continue
    return build(sup)


def list_entry(sup: Supervisor) -> dict[str, Any]:
    """An entry of ``GET /supervisor?state=true`` (``?full`` adds ``spec``)."""
    return {"id": sup.id, "state": sup.state, "detailedState": sup.detailed_state, "healthy": sup.healthy,
            "suspended": sup.suspended}


def spec_view(sup: Supervisor) -> dict[str, Any]:
    """The current spec as Druid JSON, with ``suspended`` as Druid returns it."""
    return {**sup.spec.to_druid_json(), "suspended": sup.suspended}


def history_entry(record: SupervisorRecord) -> dict[str, Any]:
    """One history row; ``version`` is when it was written, a terminate row has ``terminated``."""
    return {"spec": {**record.spec, "suspended": record.suspended}, "version": record.created_at.isoformat(),
            "suspended": record.suspended, "terminated": record.terminated}


def task_view(record: TaskRecord, active: set[str]) -> dict[str, Any]:
    """Druid's task status object (``duration`` in ms, -1 while running) plus our offsets and detail."""
    finished = record.finished_at
    return {
        "id": record.id, "type": "index_kafka", "createdTime": record.created_at.isoformat(),
        "queueInsertionTime": record.created_at.isoformat(), "statusCode": record.status, "status": record.status,
        "runnerStatusCode": "RUNNING" if record.id in active else "NONE",
        "duration": -1 if finished is None else int((finished - record.created_at).total_seconds() * 1000),
        "location": {"host": None, "port": -1, "tlsPort": -1}, "dataSource": record.datasource,
        "errorMsg": record.status_detail if record.status == "FAILED" else None,
        "supervisorId": record.supervisor_id, "statusDetail": record.status_detail,
        "startOffsets": {str(p): o for p, o in record.start_offsets.items()},
        "endOffsets": {str(p): o for p, o in record.end_offsets.items()}}
