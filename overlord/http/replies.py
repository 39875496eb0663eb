"""How every answer of the API leaves: JSON with secrets masked and scrubbed, errors in one shape.

Every JSON body goes through :meth:`Replies.view`: secret-looking keys are masked
(:func:`specs.masked.mask_secrets`) and known secret values scrubbed from every string.
Errors are ``{"error": message, "errorMessage": message}`` (pydruid reads Druid's ``errorMessage``);
invalid input adds ``"errors": [{"path", "message"}]``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fastapi.responses import Response
from starlette.types import Send

from overlord.http.redact import SecretRegistry
from overlord.overlord_errors import druid_error
from overlord.supervisor.manager import Overlord
from overlord.supervisor_status import SupervisorStatus
from specs.masked import mask_secrets

__all__ = ["ApiError", "Replies", "send_error"]


class ApiError(Exception):
    """A request the API refuses with ``status`` (4xx) and optional ``(path, message)`` pairs."""

    def __init__(self, status: int, message: str, errors: Sequence[tuple[str, str]] = ()) -> None:
        super().__init__(message)
        self.status, self.message, self.errors = status, message, list(errors)


async def send_error(send: Send, status: int, message: str, headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    """Answer a request from ASGI middleware (before any route), in Druid's error shape."""
    content = json.dumps(druid_error(status, message)).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(content)).encode()), *headers]})
    await send({"type": "http.response.body", "body": content})


@dataclass(frozen=True)
class Replies:
    """The overlord and secret registry every route answers from."""

    overlord: Overlord
    secrets: SecretRegistry

    def view(self, content: Any) -> Any:
        """``content`` as it may leave: JSON types, secrets masked and scrubbed."""
        # The JSON round trip first: it turns int keys (offset maps) into the strings mask_secrets expects.
        return self.secrets.scrub_strings(mask_secrets(json.loads(json.dumps(content, default=str))))

    def reply(self, content: Any, status: int = 200) -> Response:
        return Response(json.dumps(self.view(content)), status, media_type="application/json")

    def error(self, status: int, message: str, errors: Sequence[tuple[str, str]] = ()) -> Response:
        body = druid_error(status, message)
        if errors:
            body["errors"] = [{"path": path, "message": msg} for path, msg in errors]
        return self.reply(body, status)

    def supervisors(self) -> list[SupervisorStatus]:
        """The latest status snapshot of every supervisor, by id."""
        return sorted((sup.status for sup in list(self.overlord.supervisors.values())), key=lambda s: s.id)
