"""Outside Druid's prefix: liveness, Druid's ``/status`` and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from overlord.http.replies import Replies
from overlord.metrics import package_version

__all__ = ["service_routes"]


def service_routes(out: Replies) -> APIRouter:
    """``/health``, ``/health/leader``, ``/status``, ``/status/health`` and ``/metrics``."""
    overlord, reply = out.overlord, out.reply
    router = APIRouter()

    @router.get("/health", tags=["service"], summary="Liveness: 200 while ingestion's Spark runs, else 503")
    def health() -> Response:
        healthy = overlord.runner.spark_alive()  # nothing more: anyone may ask this, without credentials
        return reply({"healthy": healthy}, 200 if healthy else 503)

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
