"""Every HTTP request counted and timed, by method, route template and status (Prometheus).

The route is the matched route's template (``/druid/indexer/v1/supervisor/{supervisor_id}``), never
the path a client sent, so the series stay few whatever clients send; requests refused before
routing (a bad ``Host``, no credentials) count under ``unmatched``.
"""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from overlord.metrics import Metrics

__all__ = ["RequestMetrics"]


class RequestMetrics:
    """ASGI middleware: counts and times each answered request in ``metrics``."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = time.perf_counter(), 500  # 500: the app failed before answering

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            self.metrics.http_request(scope["method"], route, status, time.perf_counter() - started)
