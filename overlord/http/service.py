"""Outside Druid's prefix: liveness, Druid's ``/status`` and Prometheus metrics."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from overlord.http.replies import Replies
from overlord.metrics import package_version
from overlord.query.process import QueryProcess
from overlord.supervisor.manager import Overlord

__all__ = ["service_health", "service_routes"]


def service_health(overlord: Overlord, queries: QueryProcess) -> dict[str, Any]:
    """Whether the service can do its work, and each part's own answer, with its error (for the console).

    The parts: ingestion's Spark, the resident runners (crash-looping?) and the query engine (did its last
    start fail?).
    """
    resident = overlord.runner.resident
    parts = {"spark": {"healthy": overlord.runner.spark_alive()},
             "residentRunners": resident.health() if resident is not None else {"healthy": True, "runners": 0},
             "queryEngine": queries.health()}
    return {"healthy": all(part["healthy"] for part in parts.values()), **parts}


def service_routes(out: Replies, queries: QueryProcess) -> APIRouter:
    """``/health``, ``/health/leader``, ``/status``, ``/status/health`` and ``/metrics``."""
    overlord, reply = out.overlord, out.reply
    router = APIRouter()

    @router.get("/health", tags=["service"], summary="Liveness: 200 while ingestion's Spark, the resident runners "
                "and the query engine can run, else 503 and which cannot")
    def health() -> Response:
        found = service_health(overlord, queries)  # anyone may ask this, without credentials: booleans only
        answer = {name: {"healthy": part["healthy"]} if isinstance(part, dict) else part
                  for name, part in found.items()}
        return reply(answer, 200 if found["healthy"] else 503)

    @router.get("/health/leader", tags=["service"],
                summary="Readiness: 200 on the leader, 503 on a standby (orchestrators route to the leader)")
    def health_leader() -> Response:
        leading = overlord.leading  # nothing more: anyone may ask this, without credentials
        return reply({"leader": leading}, 200 if leading else 503)

    @router.get("/status/health", tags=["service"], summary="Liveness, as Druid answers it: true")
    def status_health() -> Response:
        return reply(True)

    @router.get("/status", tags=["service"], summary="Version, as Druid's /status (Grafana's Druid plugin asks it)")
    def status() -> Response:
        return reply({"version": package_version(), "modules": []})

    @router.get("/metrics", tags=["service"], summary="Prometheus metrics", response_class=PlainTextResponse)
    def metrics() -> Response:
        return Response(overlord.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    return router
