"""A cap on request bodies, enforced before any route reads one."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from overlord.http.replies import send_error

__all__ = ["BodySizeLimit"]


class BodySizeLimit:
    """ASGI middleware: a body over ``max_bytes`` gets a 413 naming the limit, and no route sees it.

    A declared ``Content-Length`` is checked before anything is read (the server holds the body
    to that length); a chunked body is read up to the limit here, then handed on whole.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            if not declared.isdigit() or int(declared) > self.max_bytes:
                await self._too_large(send)
                return
            await self.app(scope, receive, send)
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > self.max_bytes:
                await self._too_large(send)
                return
        whole: list[Message] = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def replay() -> Message:
            return whole.pop() if whole else await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, send: Send) -> None:
        await send_error(send, 413, f"the request body is larger than {self.max_bytes:,} bytes, the overlord's "
                                    "limit (OVERLORD_HTTP_MAX_BODY_BYTES)")
