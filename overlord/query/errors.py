"""Errors of the query engine."""

from __future__ import annotations

from typing import Any

from overlord.errors import OverlordError, druid_error

__all__ = ["QueryError"]

_CATEGORIES = {"QUERY_TIMEOUT": "TIMEOUT", "QUERY_CANCELLED": "CANCELED", "RESULT_TOO_LARGE": "CAPACITY_EXCEEDED"}
"""Druid's error category of the classes that are not plain invalid input."""


class QueryError(OverlordError):
    """A user error in a query (HTTP 400), with the engine's message and error class."""

    def __init__(self, message: str, error_class: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.error_class = error_class

    def to_druid(self) -> dict[str, Any]:
        """The body Druid returns with a 400 for an invalid query."""
        return druid_error(400, self.message, category=_CATEGORIES.get(self.error_class or ""),
                           context={"errorClass": self.error_class} if self.error_class else {})
