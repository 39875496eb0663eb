"""Druid's supervisor calls under ``/druid/indexer/v1/supervisor``."""

from __future__ import annotations

import json
import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from overlord.http.audit import author_of
from overlord.http.redact import SecretRegistry
from overlord.http.replies import ApiError, Replies
from overlord.http.status_payloads import stats_payload, status_payload
from overlord.http.views import history_entry, list_entry, spec_view
from overlord.supervisor.sampler import SamplerBusy, parse_request, sample
from overlord.supervisor.task_ranges import TopicChanged, committed_for, reads_partition
from segment_store import Offsets, committed_offsets
from segment_store.leadership import current_leader
from specs.spec_errors import SpecError, key_path

__all__ = ["PREFIX", "ResetOffsetsRequest", "supervisor_routes"]

PREFIX = "/druid/indexer/v1"


class PartitionOffsets(BaseModel):
    """Druid's ``partitions`` object: the offsets (next record to read) to set, per partition."""

    model_config = ConfigDict(populate_by_name=True)
    type: Literal["end"] = "end"
    stream: str = Field(min_length=1)
    partition_offset_map: dict[str, Annotated[int, Field(ge=0)]] = Field(alias="partitionOffsetMap", min_length=1)
    """Partition (``"0"``, or ``"topic:0"`` with a topicPattern) -> offset."""


class ResetOffsetsRequest(BaseModel):
    """Body of ``POST /supervisor/{id}/resetOffsets``, as Druid's."""

    type: Literal["kafka"] = "kafka"
    partitions: PartitionOffsets


def supervisor_routes(out: Replies) -> APIRouter:
    """Create/update, list, status, health, stats, suspend/resume, resets, terminate, history."""
    overlord, reply, supervisors, secrets = out.overlord, out.reply, out.supervisors, out.secrets
    router = APIRouter()

    @router.post(f"{PREFIX}/supervisor", tags=["supervisors"], summary="Create or update a supervisor",
              openapi_extra={"requestBody": {"required": True, "content": {
                  "application/json": {"schema": {"$ref": "#/components/schemas/SupervisorSpec"}}}}})
    async def submit(request: Request, validate_only: Annotated[bool, Query(alias="validateOnly")] = False
                     ) -> Response:
        """``?validateOnly=true``: every check a submit makes, and nothing changed (200 or the same 400)."""
        body: Any = await request.body()
        try:
            body = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            pass  # not JSON: submit reports it
        try:
            spec = await run_in_threadpool(overlord.submit, body, author_of(request), validate_only=validate_only)
        except SpecError as exc:  # scrubbed of this body's secrets, which are not remembered
            raise exc.scrubbed(SecretRegistry.of([body]).scrub) from None
        if validate_only:
            return reply({"id": spec.id, "valid": True, "ignoredFields": spec.ignored_fields})
        secrets.learn([body])  # accepted: its secrets are scrubbed from free text from now on
        return reply({"id": spec.id, "ignoredFields": spec.ignored_fields})

    @router.post(f"{PREFIX}/sampler", tags=["supervisors"], summary="Sample a topic through a spec (nothing committed)")
    async def sampler(request: Request) -> Response:
        body: Any = await request.body()
        try:
            body = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise SpecError.at("$", "not valid JSON") from None
        spec, config = parse_request(body)
        try:
            answer = await run_in_threadpool(sample, spec, overlord.settings, config)
        except SamplerBusy as exc:
            raise ApiError(429, str(exc)) from None
        except SpecError as exc:
            raise exc.scrubbed(SecretRegistry.of([body]).scrub) from None
        return reply(answer)

    @router.get(f"{PREFIX}/supervisor", tags=["supervisors"], summary="Supervisor ids, or their state and specs")
    def list_supervisors(full: str | None = None, state: bool = False) -> Response:
        if full is not None and full.lower() != "false":
            return reply([{**list_entry(s), "spec": spec_view(s)} for s in supervisors()])
        if state:
            return reply([list_entry(s) for s in supervisors()])
        return reply([s.id for s in supervisors()])

    @router.get(f"{PREFIX}/supervisor/history", tags=["supervisors"], summary="Spec history of every supervisor")
    def all_history() -> Response:
        grouped: dict[str, list[dict[str, Any]]] = {}
        for record in overlord.history():
            grouped.setdefault(record.id, []).append(history_entry(record))
        return reply(grouped)

    @router.get(f"{PREFIX}/supervisor/{{supervisor_id}}", tags=["supervisors"], summary="Current spec")
    def get_spec(supervisor_id: str) -> Response:
        return reply(spec_view(overlord.get(supervisor_id).status))

    @router.get(f"{PREFIX}/supervisor/{{supervisor_id}}/status", tags=["supervisors"], summary="Offsets, lag, tasks")
    def get_status(supervisor_id: str) -> Response:
        return reply(status_payload(overlord.get(supervisor_id).status))

    @router.get(f"{PREFIX}/supervisor/{{supervisor_id}}/health", tags=["supervisors"], summary="200 healthy, 503 not")
    def get_health(supervisor_id: str) -> Response:
        status = overlord.get(supervisor_id).status
        return reply({"healthy": status.healthy, "state": status.state}, 200 if status.healthy else 503)

    @router.get(f"{PREFIX}/supervisor/{{supervisor_id}}/series", tags=["supervisors"],
                summary="Lag, records/s and task outcomes in 10-s steps (min and max of each) for the last hour")
    def get_series(supervisor_id: str) -> Response:
        return reply(overlord.get(supervisor_id).series.as_json(time.time()))

    @router.get(f"{PREFIX}/supervisor/{{supervisor_id}}/stats", tags=["supervisors"], summary="Row counters, rates")
    def get_stats(supervisor_id: str) -> Response:
        return reply(stats_payload(overlord.get(supervisor_id).status))

    def suspend_or_resume(supervisor_id: str, suspend: bool, request: Request) -> Response:
        sup = overlord.get(supervisor_id)
        if sup.suspended == suspend:
            raise ApiError(400, f"[{supervisor_id}] is already {'suspended' if suspend else 'running'}")
        return reply(spec_view(overlord.set_suspended(supervisor_id, suspend, author_of(request)).status))

    @router.post(f"{PREFIX}/supervisor/suspendAll", tags=["supervisors"], summary="Suspend every running supervisor")
    def suspend_all(request: Request) -> Response:
        for status in supervisors():
            if not status.suspended:
                overlord.set_suspended(status.id, True, author_of(request))
        return reply({"status": "success"})

    @router.post(f"{PREFIX}/supervisor/resumeAll", tags=["supervisors"], summary="Resume every suspended supervisor")
    def resume_all(request: Request) -> Response:
        for status in supervisors():
            if status.suspended:
                overlord.set_suspended(status.id, False, author_of(request))
        return reply({"status": "success"})

    @router.post(f"{PREFIX}/supervisor/terminateAll", tags=["supervisors"], summary="Terminate every supervisor")
    def terminate_all(request: Request) -> Response:
        for status in supervisors():
            overlord.terminate(status.id, author_of(request))
        return reply({"status": "success"})

    @router.post(f"{PREFIX}/supervisor/{{supervisor_id}}/suspend", tags=["supervisors"], summary="Stop launching tasks")
    def suspend(supervisor_id: str, request: Request) -> Response:
        return suspend_or_resume(supervisor_id, True, request)

    @router.post(f"{PREFIX}/supervisor/{{supervisor_id}}/resume", tags=["supervisors"], summary="Launch tasks again")
    def resume(supervisor_id: str, request: Request) -> Response:
        return suspend_or_resume(supervisor_id, False, request)

    @router.post(f"{PREFIX}/supervisor/{{supervisor_id}}/reset", tags=["supervisors"],
              summary="Forget committed offsets; restart from earliest/latest (per useEarliestOffset)")
    def reset(supervisor_id: str) -> Response:
        overlord.reset(supervisor_id)
        return reply({"id": supervisor_id})

    @router.post(f"{PREFIX}/supervisor/{{supervisor_id}}/resetOffsets", tags=["supervisors"],
              summary="Set the committed offsets of some partitions")
    def reset_offsets(supervisor_id: str, body: ResetOffsetsRequest) -> Response:
        sup = overlord.get(supervisor_id)
        io, wanted = sup.spec.spec.io_config, body.partitions
        topic = io.topic or io.topic_pattern
        if wanted.stream != topic:
            raise ApiError(400, f"stream {wanted.stream!r} is not the supervisor's topic {topic!r}",
                           [("partitions.stream", f"expected {topic!r}, got {wanted.stream!r}")])
        try:
            offsets = Offsets(wanted.partition_offset_map)
        except ValueError as exc:
            raise ApiError(400, f"partitions.partitionOffsetMap: {exc}",
                           [("partitions.partitionOffsetMap", str(exc))]) from None
        status = sup.status
        known = set(status.latest)
        unknown = [str(p) for p in offsets if (known and p not in known) or not reads_partition(sup.spec, p)]
        if unknown:
            raise ApiError(400, f"{topic!r} has no partitions {unknown}; it has {sorted(map(str, known))}",
                           [(f"partitions.partitionOffsetMap{key_path(p)}", "no such partition") for p in unknown])
        try:  # offsets of another stream are forgotten by a full reset first, never mixed with these
            committed_for(sup.spec, committed_offsets(overlord.engine, sup.spec.datasource))
        except TopicChanged as exc:
            raise ApiError(400, str(exc), [("partitions.stream", str(exc))]) from None
        outside = [(f"partitions.partitionOffsetMap{key_path(str(p))}",
                    f"offset {o} is outside what partition {p} holds: from its earliest offset "
                    f"{status.earliest.get(p, 0)} to its latest offset {status.latest[p]}")
                   for p, o in offsets.items() if p in status.latest
                   and not status.earliest.get(p, 0) <= o <= status.latest[p]]
        if outside:  # it would stop the partition (out of range) rather than read from there
            raise ApiError(400, "; ".join(message for _, message in outside), outside)
        overlord.reset(supervisor_id, offsets)
        return reply({"id": supervisor_id})

    @router.post(f"{PREFIX}/supervisor/{{supervisor_id}}/terminate", tags=["supervisors"], summary="Stop for good")
    def terminate(supervisor_id: str, request: Request) -> Response:
        overlord.terminate(supervisor_id, author_of(request))
        return reply({"id": supervisor_id})

    @router.get(f"{PREFIX}/supervisor/{{supervisor_id}}/history", tags=["supervisors"], summary="Spec history")
    def history(supervisor_id: str) -> Response:
        return reply([history_entry(r) for r in overlord.history(supervisor_id)])

    @router.get(f"{PREFIX}/isLeader", tags=["supervisors"], summary="200 if this overlord leads, else 404")
    def is_leader() -> Response:
        return reply({"leader": overlord.leading}, 200 if overlord.leading else 404)

    @router.get(f"{PREFIX}/leader", tags=["supervisors"], response_class=PlainTextResponse,
                summary="The leader's advertised URL (its name if it advertises none), as Druid answers: plain text")
    def leader() -> Response:
        name = current_leader(overlord.engine)
        if name is None:
            raise ApiError(503, "no overlord has been elected leader yet")
        return PlainTextResponse(name)

    return router
