"""The overlord's HTTP API: Druid's supervisor and task calls under ``/druid/indexer/v1``, plus ``/``,
``/metrics`` and ``/health``.

Every JSON body leaves through :func:`create_app`'s ``view``: secret-looking keys are masked
(:func:`overlord.http.status.mask_secrets`) and known secret values scrubbed from every string.
Errors are ``{"error": message}``; invalid input adds ``"errors": [{"path", "message"}]``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from overlord.errors import NotFound
from overlord.http.dashboard import render_dashboard, render_metrics
from overlord.http.query_routes import add_query_routes
from overlord.http.redact import SecretRegistry
from overlord.http.status import mask_secrets, stats_payload, status_payload
from overlord.http.views import history_entry, list_entry, spec_view, task_view
from overlord.supervisor.manager import Overlord
from overlord.supervisor.metadata_store import TaskRecord
from overlord.supervisor.status import SupervisorStatus
from specs import SpecError, SupervisorSpec
from specs.errors import key_path
from specs.loader import loc_path

__all__ = ["PREFIX", "ResetOffsetsRequest", "create_app"]

logger = logging.getLogger(__name__)

PREFIX = "/druid/indexer/v1"


class PartitionOffsets(BaseModel):
    """Druid's ``partitions`` object: the offsets (next record to read) to set, per partition."""

    model_config = ConfigDict(populate_by_name=True)
    type: Literal["end"] = "end"
    stream: str = Field(min_length=1)
    partition_offset_map: dict[Annotated[int, Field(ge=0)], Annotated[int, Field(ge=0)]] = Field(
        alias="partitionOffsetMap", min_length=1)


class ResetOffsetsRequest(BaseModel):
    """Body of ``POST /supervisor/{id}/resetOffsets``, as Druid's."""

    type: Literal["kafka"] = "kafka"
    partitions: PartitionOffsets


class ApiError(Exception):
    """A request the API refuses with ``status`` (4xx) and optional ``(path, message)`` pairs."""

    def __init__(self, status: int, message: str, errors: Sequence[tuple[str, str]] = ()) -> None:
        super().__init__(message)
        self.status, self.message, self.errors = status, message, list(errors)


def _validation_path(loc: Sequence[int | str]) -> str:
    parts = list(loc[1:]) if loc and loc[0] in ("body", "query", "path", "header") else list(loc)
    if loc and loc[0] == "body" and parts and isinstance(parts[-1], int) and len(parts) == 1:
        parts = []  # json_invalid: loc is ("body", character position)
    return loc_path(parts) or "$"


def _spec_openapi() -> dict[str, Any]:
    """OpenAPI component schemas of the supervisor spec (the body of ``POST /supervisor``)."""
    schema = SupervisorSpec.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
    defs = schema.pop("$defs", {})
    return {**defs, "SupervisorSpec": schema}


def create_app(overlord: Overlord, secrets: SecretRegistry | None = None) -> FastAPI:
    """The ASGI app over ``overlord`` (already started). ``secrets`` is shared with the log filter."""
    secrets = secrets or SecretRegistry()
    secrets.learn(sup.spec.to_druid_json() for sup in list(overlord.supervisors.values()))
    app = FastAPI(title="overlord", version="0.1.0",
                  description="Druid-compatible supervisor and task API of the Kafka-to-segment indexing service.")

    def view(content: Any) -> Any:
        # The JSON round trip first: it turns int keys (offset maps) into the strings mask_secrets expects.
        return secrets.scrub_strings(mask_secrets(json.loads(json.dumps(content, default=str))))

    def reply(content: Any, status: int = 200) -> Response:
        return Response(json.dumps(view(content)), status, media_type="application/json")

    def supervisors() -> list[SupervisorStatus]:
        """The latest status snapshot of every supervisor, by id."""
        return sorted((sup.status for sup in list(overlord.supervisors.values())), key=lambda s: s.id)

    def statuses() -> list[dict[str, Any]]:
        return [view(status_payload(status)) for status in supervisors()]

    # --- errors ----------------------------------------------------------------------------

    def error_reply(status: int, message: str, errors: Sequence[tuple[str, str]] = ()) -> Response:
        body: dict[str, Any] = {"error": message}
        if errors:
            body["errors"] = [{"path": path, "message": msg} for path, msg in errors]
        return reply(body, status)

    @app.exception_handler(SpecError)
    async def _spec_error(_request: Request, exc: SpecError) -> Response:
        detail = "; ".join(f"{p}: {m}" if p else m for p, m in exc.errors)
        return error_reply(400, f"invalid supervisor spec: {detail}", exc.errors)

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(_request: Request, exc: RequestValidationError) -> Response:
        errors = [(_validation_path(e.get("loc", ())), str(e.get("msg", "invalid"))) for e in exc.errors()]
        return error_reply(400, "invalid request: " + "; ".join(f"{p}: {m}" for p, m in errors), errors)

    @app.exception_handler(NotFound)
    async def _not_found(_request: Request, exc: NotFound) -> Response:
        return error_reply(404, str(exc))

    @app.exception_handler(ApiError)
    async def _refused(_request: Request, exc: ApiError) -> Response:
        return error_reply(exc.status, exc.message, exc.errors)

    @app.middleware("http")
    async def _unexpected(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        try:
            return await call_next(request)
        except Exception:
            logger.exception("%s %s failed", request.method, request.url.path)
            return error_reply(500, "internal error; the overlord's log has the traceback")

    # --- supervisors -----------------------------------------------------------------------

    @app.post(f"{PREFIX}/supervisor", tags=["supervisors"], summary="Create or update a supervisor",
              openapi_extra={"requestBody": {"required": True, "content": {
                  "application/json": {"schema": {"$ref": "#/components/schemas/SupervisorSpec"}}}}})
    async def submit(request: Request) -> Response:
        body: Any = await request.body()
        try:
            body = json.loads(body)
            secrets.learn([body])  # before validation, so even an error message cannot echo one
        except (ValueError, UnicodeDecodeError):
            pass  # not JSON: submit reports it
        supervisor_id = await run_in_threadpool(overlord.submit, body)
        return reply({"id": supervisor_id})

    @app.get(f"{PREFIX}/supervisor", tags=["supervisors"], summary="Supervisor ids, or their state and specs")
    def list_supervisors(full: str | None = None, state: bool = False) -> Response:
        if full is not None and full.lower() != "false":
            return reply([{**list_entry(s), "spec": spec_view(s)} for s in supervisors()])
        if state:
            return reply([list_entry(s) for s in supervisors()])
        return reply([s.id for s in supervisors()])

    @app.get(f"{PREFIX}/supervisor/history", tags=["supervisors"], summary="Spec history of every supervisor")
    def all_history() -> Response:
        grouped: dict[str, list[dict[str, Any]]] = {}
        for record in overlord.history():
            grouped.setdefault(record.id, []).append(history_entry(record))
        return reply(grouped)

    @app.get(f"{PREFIX}/supervisor/{{supervisor_id}}", tags=["supervisors"], summary="Current spec")
    def get_spec(supervisor_id: str) -> Response:
        return reply(spec_view(overlord.get(supervisor_id).status))

    @app.get(f"{PREFIX}/supervisor/{{supervisor_id}}/status", tags=["supervisors"], summary="Offsets, lag, tasks")
    def get_status(supervisor_id: str) -> Response:
        return reply(status_payload(overlord.get(supervisor_id).status))

    @app.get(f"{PREFIX}/supervisor/{{supervisor_id}}/health", tags=["supervisors"], summary="200 healthy, 503 not")
    def get_health(supervisor_id: str) -> Response:
        status = overlord.get(supervisor_id).status
        return reply({"healthy": status.healthy, "state": status.state}, 200 if status.healthy else 503)

    @app.get(f"{PREFIX}/supervisor/{{supervisor_id}}/stats", tags=["supervisors"], summary="Row counters, rates")
    def get_stats(supervisor_id: str) -> Response:
        return reply(stats_payload(overlord.get(supervisor_id).status))

    def suspend_or_resume(supervisor_id: str, suspend: bool) -> Response:
        sup = overlord.get(supervisor_id)
        if sup.suspended == suspend:
            raise ApiError(400, f"[{supervisor_id}] is already {'suspended' if suspend else 'running'}")
        return reply(spec_view(overlord.set_suspended(supervisor_id, suspend).status))

    @app.post(f"{PREFIX}/supervisor/{{supervisor_id}}/suspend", tags=["supervisors"], summary="Stop launching tasks")
    def suspend(supervisor_id: str) -> Response:
        return suspend_or_resume(supervisor_id, True)

    @app.post(f"{PREFIX}/supervisor/{{supervisor_id}}/resume", tags=["supervisors"], summary="Launch tasks again")
    def resume(supervisor_id: str) -> Response:
        return suspend_or_resume(supervisor_id, False)

    @app.post(f"{PREFIX}/supervisor/{{supervisor_id}}/reset", tags=["supervisors"],
              summary="Forget committed offsets; restart from earliest/latest (per useEarliestOffset)")
    def reset(supervisor_id: str) -> Response:
        overlord.reset(supervisor_id)
        return reply({"id": supervisor_id})

    @app.post(f"{PREFIX}/supervisor/{{supervisor_id}}/resetOffsets", tags=["supervisors"],
              summary="Set the committed offsets of some partitions")
    def reset_offsets(supervisor_id: str, body: ResetOffsetsRequest) -> Response:
        sup = overlord.get(supervisor_id)
        topic, wanted = sup.spec.spec.io_config.topic, body.partitions
        if wanted.stream != topic:
            raise ApiError(400, f"stream {wanted.stream!r} is not the supervisor's topic {topic!r}",
                           [("partitions.stream", f"expected {topic!r}, got {wanted.stream!r}")])
        known = set(sup.status.latest)
        unknown = [p for p in wanted.partition_offset_map if known and p not in known]
        if unknown:
            raise ApiError(400, f"topic {topic!r} has no partitions {unknown}; it has {sorted(known)}",
                           [(f"partitions.partitionOffsetMap{key_path(str(p))}", "no such partition") for p in unknown])
        overlord.reset(supervisor_id, wanted.partition_offset_map)
        return reply({"id": supervisor_id})

    @app.post(f"{PREFIX}/supervisor/{{supervisor_id}}/terminate", tags=["supervisors"], summary="Stop for good")
    def terminate(supervisor_id: str) -> Response:
        overlord.terminate(supervisor_id)
        return reply({"id": supervisor_id})

    @app.get(f"{PREFIX}/supervisor/{{supervisor_id}}/history", tags=["supervisors"], summary="Spec history")
    def history(supervisor_id: str) -> Response:
        return reply([history_entry(r) for r in overlord.history(supervisor_id)])

    # --- tasks -----------------------------------------------------------------------------

    def active_ids() -> set[str]:
        return {task.id for status in supervisors() for task in status.active_tasks}

    @app.get(f"{PREFIX}/tasks", tags=["tasks"], summary="Tasks, newest first")
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

    @app.get(f"{PREFIX}/task/{{task_id}}", tags=["tasks"], summary="A task's ranges and report")
    def get_task(task_id: str) -> Response:
        t = task_record(task_id)
        return reply({"task": task_id, "payload": {
            "id": t.id, "type": t.type, "dataSource": t.datasource, "supervisorId": t.supervisor_id,
            "startOffsets": t.start_offsets.to_json(), "endOffsets": t.end_offsets.to_json(), "report": t.report}})

    @app.get(f"{PREFIX}/task/{{task_id}}/status", tags=["tasks"], summary="A task's status")
    def get_task_status(task_id: str) -> Response:
        return reply({"task": task_id, "status": task_view(task_record(task_id), active_ids())})

    @app.post(f"{PREFIX}/task/{{task_id}}/shutdown", tags=["tasks"], summary="Stop a task; it will not publish")
    def shutdown_task(task_id: str) -> Response:
        overlord.shutdown_task(task_id)
        return reply({"task": task_id})

    # --- service ---------------------------------------------------------------------------

    @app.get("/health", tags=["service"], summary="Liveness")
    def health() -> Response:
        return reply({"healthy": True, "supervisors": len(overlord.supervisors)})

    @app.get("/metrics", tags=["service"], summary="Prometheus metrics", response_class=PlainTextResponse)
    def metrics() -> Response:
        return PlainTextResponse(render_metrics(statuses()), media_type="text/plain; version=0.0.4")

    @app.get("/", tags=["service"], summary="Status dashboard", response_class=HTMLResponse)
    def dashboard() -> Response:
        return HTMLResponse(render_dashboard(statuses()))

    base_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = base_openapi()
            schema.setdefault("components", {}).setdefault("schemas", {}).update(_spec_openapi())
        return app.openapi_schema or {}

    app.openapi = openapi  # type: ignore[method-assign]
    add_query_routes(app, overlord)
    return app
