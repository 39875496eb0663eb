"""Outside Druid's prefix: liveness, Prometheus metrics and the status page."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, PlainTextResponse, Response

from overlord.http.dashboard import render_dashboard, render_metrics
from overlord.http.replies import Replies

__all__ = ["service_routes"]


def service_routes(out: Replies) -> APIRouter:
    """``/health``, ``/metrics`` and ``/``."""
    overlord, reply, statuses = out.overlord, out.reply, out.statuses
    router = APIRouter()

    @router.get("/health", tags=["service"], summary="Liveness")
    def health() -> Response:
        return reply({"healthy": True, "leader": overlord.leading, "supervisors": len(overlord.supervisors)})

    @router.get("/metrics", tags=["service"], summary="Prometheus metrics", response_class=PlainTextResponse)
    def metrics() -> Response:
        return PlainTextResponse(render_metrics(statuses()), media_type="text/plain; version=0.0.4")

    @router.get("/", tags=["service"], summary="Status dashboard", response_class=HTMLResponse)
    def dashboard() -> Response:
        return HTMLResponse(render_dashboard(statuses()))

    return router
