"""Refuse changes that a page of another site makes with the browser's credentials (CSRF).

A browser sends cached Basic credentials with any request a page makes to this overlord, a
form that another site's page submits included. Such a request carries the page's ``Origin``
(or ``Sec-Fetch-Site: cross-site``); a request that may change something (any method but GET,
HEAD and OPTIONS) from an origin other than the overlord's own gets a 403. Clients that are not
browsers (the CLI, pydruid, curl) send neither header and are not affected; reads are not
changes, and without CORS headers their answers stay hidden from the other site's page.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from overlord.http.replies import send_error

__all__ = ["SameOriginWrites"]

_READS = frozenset({"GET", "HEAD", "OPTIONS"})


class SameOriginWrites:
    """ASGI middleware: a cross-site request that may change something gets a 403."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in _READS and _cross_site(dict(scope["headers"])):
            await send_error(send, 403, "refused: a page of another site may not change this overlord "
                                        "(cross-site request; use the console, the CLI or an API client)")
            return
        await self.app(scope, receive, send)


def _cross_site(headers: dict[bytes, bytes]) -> bool:
    if headers.get(b"sec-fetch-site", b"").decode("latin-1") in ("cross-site", "same-site"):
        return True
    origin = headers.get(b"origin")
    if origin is None:
        return False
    host = headers.get(b"host", b"").decode("latin-1")
    return urlsplit(origin.decode("latin-1")).netloc != host  # "null" (sandboxed, file:) has no host either
