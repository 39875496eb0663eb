"""Request bodies are JSON, declared so, and nest at most :data:`MAX_JSON_DEPTH` levels.

- A request that may change something (any method but GET, HEAD and OPTIONS) and carries a body
  must declare ``Content-Type: application/json`` (a ``charset`` of UTF-8 allowed), else a 415. A
  page of another site can submit a form (``text/plain``, ``application/x-www-form-urlencoded``,
  ``multipart/form-data``) without asking the browser's permission, never a JSON body: this closes
  that CSRF path even where ``Origin`` is missing. Requests without a body (``POST .../suspend``)
  need no content type. Druid's clients (pydruid, its SQLAlchemy dialect, the console) send JSON.
- A JSON body nesting objects and arrays deeper than :data:`MAX_JSON_DEPTH` gets a 400 naming the
  limit before any route parses it: no spec or query needs more, and deeper values break
  recursive code downstream (pydantic's serializer refuses more than a few hundred levels, which
  answered a 500).
"""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from overlord.http.replies import send_error
from specs.limits import MAX_JSON_DEPTH

__all__ = ["MAX_JSON_DEPTH", "JsonBodies", "json_depth_exceeds"]


_READS = frozenset({"GET", "HEAD", "OPTIONS"})
_STRUCTURE = re.compile(rb'[\[\]{}"\\]')
_UTF8 = frozenset({"utf-8", "utf8"})


def json_depth_exceeds(body: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``body`` (JSON text, valid or not) nests objects and arrays deeper than ``limit``.

    One pass over the brackets, quotes and backslashes (brackets inside strings do not count);
    it stops at the first level past the limit.
    """
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    depth, in_string, skip_to = 0, False, -1
    for match in _STRUCTURE.finditer(body):
        at = match.start()
        if at < skip_to:
            continue  # the character after a backslash
        char = body[at]
        if in_string:
            if char == 0x5C:  # backslash: the next character is escaped
                skip_to = at + 2
            elif char == 0x22:
                in_string = False
        elif char == 0x22:
            in_string = True
        elif char in (0x5B, 0x7B):
            depth += 1
            if depth > limit:
                return True
        elif char in (0x5D, 0x7D):
            depth -= 1
    return False


def is_json(content_type: str) -> bool:
    """Whether a ``Content-Type`` value is ``application/json``, with at most a UTF-8 charset."""
    media, *params = (part.strip().lower() for part in content_type.split(";"))
    if media != "application/json":
        return False
    for param in filter(None, params):
        name, _, value = param.partition("=")
        if name.strip() != "charset" or value.strip().strip('"') not in _UTF8:
            return False
    return True


def _has_body(headers: dict[bytes, bytes]) -> bool:
    length = headers.get(b"content-length")
    return b"transfer-encoding" in headers or (length is not None and length.strip() not in (b"", b"0"))


class JsonBodies:
    """ASGI middleware: bodies of changes must be declared JSON (else 415) and nest at most ``max_depth`` (else 400).

    Place it inside :class:`overlord.http.body_limit.BodySizeLimit`: it reads the whole body, then
    hands it on.
    """

    def __init__(self, app: ASGIApp, max_depth: int = MAX_JSON_DEPTH) -> None:
        self.app, self.max_depth = app, max_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in _READS:
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        if not _has_body(headers):
            await self.app(scope, receive, send)
            return
        content_type = headers.get(b"content-type", b"").decode("latin-1")
        if not is_json(content_type):
            await send_error(send, 415, f"expected a JSON body (Content-Type: application/json), got "
                                        f"{content_type or 'no Content-Type'!r}")
            return
        chunks, more = [], True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if json_depth_exceeds(body, self.max_depth):
            await send_error(send, 400, f"invalid request: the JSON body nests objects and arrays deeper than "
                                        f"{self.max_depth} levels, the overlord's limit")
            return
        whole: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

        async def replay() -> Message:
            return whole.pop() if whole else await receive()

        await self.app(scope, replay, send)
