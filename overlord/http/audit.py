"""The audit log: who changed what, when, from where.

Every request that needs the write role and got past authentication is recorded in PostgreSQL's
``audit_log`` as its answer starts (its status says whether the change happened; the client gets
the answer once the row is written), and logged. A standby's redirect is not recorded: the leader
records the call it redirects. The author is the authenticated user or token name (``anonymous``
when authentication is off); Druid's ``X-Druid-Comment`` header is kept as the comment.
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
        recorded = False

        async def record_then_answer(message: Message) -> None:
            nonlocal recorded
            if message["type"] == "http.response.start" and not recorded:
                recorded = True  # before the answer leaves: a client that has it finds the change in the log
                if message["status"] != 307:  # a standby's redirect: the leader records the change
                    await self._record(scope, int(message["status"]))
            await send(message)

        try:
            await self.app(scope, receive, record_then_answer)
        finally:
            if not recorded:  # the app failed before answering: the client sees a 500
                await self._record(scope, 500)

    async def _record(self, scope: Scope, status: int) -> None:
        author, method = author_of(scope), scope["method"]
        path = scope["path"].replace("\x00", "\\x00")  # PostgreSQL text holds no NUL (the answer was a 400)
        client = scope.get("client")
        address = client[0] if client else None
        comment = dict(scope["headers"]).get(b"x-druid-comment", b"").decode("utf-8", "replace")
        comment = comment.replace("\x00", "\\x00")[:_MAX_COMMENT] or None
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
