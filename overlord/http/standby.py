"""A standby overlord sends Druid's leader-only calls to the leader, as Druid's overlords do.

A standby runs no supervisors, so its answers to ``/druid/indexer/v1`` and
``/druid/coordinator/v1`` would be wrong (no supervisors) or refused (writes). It redirects them
(307: the method and body are kept) to the leader's ``OVERLORD_ADVERTISED_URL``, read from the
leadership row; a leader that advertises none is named in a 503. ``isLeader`` and ``leader`` are
answered by each overlord itself, and queries, the console, metrics and health by any.
"""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from overlord.http.replies import send_error
from overlord.supervisor.manager import Overlord
from segment_store.leadership import current_leader

__all__ = ["LEADER_ONLY_PREFIXES", "StandbyRedirect"]

LEADER_ONLY_PREFIXES = ("/druid/indexer/v1/", "/druid/coordinator/v1/")
"""The paths whose answers only the leader has."""

_OWN_ANSWER = frozenset({"/druid/indexer/v1/isLeader", "/druid/indexer/v1/leader"})


class StandbyRedirect:
    """ASGI middleware: on a standby, a leader-only call gets a 307 to the leader (or a 503 naming it)."""

    def __init__(self, app: ASGIApp, overlord: Overlord) -> None:
        self.app, self.overlord = app, overlord

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if (scope["type"] != "http" or self.overlord.leading or path in _OWN_ANSWER
                or not path.startswith(LEADER_ONLY_PREFIXES)):
            await self.app(scope, receive, send)
            return
        leader = await run_in_threadpool(current_leader, self.overlord.engine)
        if leader is None or not leader.startswith(("http://", "https://")):
            await send_error(send, 503, f"this overlord ({self.overlord.elector.name}) is a standby and the leader "
                             f"({leader or 'none elected yet'}) advertises no URL to redirect to: set "
                             "OVERLORD_ADVERTISED_URL on every overlord, or send this to the leader")
            return
        query = scope.get("query_string", b"").decode("latin-1")
        location = leader.rstrip("/") + scope.get("raw_path", path.encode()).decode("latin-1") + (
            f"?{query}" if query else "")
        await send({"type": "http.response.start", "status": 307,
                    "headers": [(b"location", location.encode("latin-1")), (b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})
