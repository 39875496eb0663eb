"""Errors of the query engine."""

from __future__ import annotations

from typing import Any

from overlord.errors import OverlordError

__all__ = ["QueryError"]


class QueryError(OverlordError):
    """A user error in a query (HTTP 400), with the engine's message and error class."""

    def __init__(self, message: str, error_class: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.error_class = error_class

    def to_druid(self) -> dict[str, Any]:
        """The body Druid returns with a 400 for an invalid query."""
        context = {"errorClass": self.error_class} if self.error_class else {}
        return {"error": "druidException", "errorCode": "invalidInput", "persona": "USER",
                "category": "INVALID_INPUT", "errorMessage": self.message, "context": context}
