"""The audit log: who changed what, when, from where.

Every request that needs the write role and got past authentication is recorded once it is
answered (the answer's status says whether the change happened) in PostgreSQL's ``audit_log``,
and logged. A standby's redirect is not recorded: the leader records the call it redirects.
The author is the authenticated user or token name (``anonymous`` when authentication is off);
Druid's ``X-Druid-Comment`` header is kept as the comment.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from overlord.http.auth import required_role
from overlord.http.replies import Replies
from overlord.supervisor.metadata_store import MetadataStore

__all__ = ["ANONYMOUS", "AuditLog", "audit_routes", "author_of"]

logger = logging.getLogger(__name__)

ANONYMOUS = "anonymous"
"""The author of changes made while authentication is off (``--insecure-open``)."""
_MAX_COMMENT = 1_000


def author_of(connection: HTTPConnection | Mapping[str, Any]) -> str:
    """Who makes this request: the user or token :class:`overlord.http.auth.AuthMiddleware` verified."""
    scope = connection.scope if isinstance(connection, HTTPConnection) else connection
    return str(scope.get("user") or ANONYMOUS)


class AuditLog:
    """ASGI middleware: records each answered change in the audit log (see the module docstring)."""

    def __init__(self, app: ASGIApp, store: MetadataStore) -> None:
        self.app, self.store = app, store

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or required_role(scope["method"], scope["path"]) != "write":
            await self.app(scope, receive, send)
            return
        status = 500  # what the client sees if the app fails before answering

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            if status != 307:  # a standby's redirect: the leader records the change
                await self._record(scope, status)

    async def _record(self, scope: Scope, status: int) -> None:
        author, method, path = author_of(scope), scope["method"], scope["path"]
        client = scope.get("client")
        address = client[0] if client else None
        headers = dict(scope["headers"])
        comment = headers.get(b"x-druid-comment", b"").decode("utf-8", "replace")[:_MAX_COMMENT] or None
        logger.info("audit: %s %s by %s from %s: %d%s", method, path, author, address, status,
                    f" ({comment})" if comment else "")
        try:
            await run_in_threadpool(self.store.record_change, author, address, method, path, status, comment)
        except Exception:  # the change is made; its record failing must not turn the answer into an error
            logger.exception("audit: could not record %s %s by %s", method, path, author)


def audit_routes(out: Replies) -> APIRouter:
    """``GET /druid/indexer/v1/audit``: the newest changes (ours; Druid keeps its audit in the metadata store)."""
    router = APIRouter()

    @router.get("/druid/indexer/v1/audit", tags=["audit"], summary="The newest changes: who, what, when, from where")
    def changes(limit: Annotated[int, Query(alias="max", ge=1, le=10_000)] = 100) -> Response:
        return out.reply([{**row, "at": row["at"].isoformat()} for row in out.overlord.store.changes(limit)])

    return router
