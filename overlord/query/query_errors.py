"""Errors of the query engine."""

from __future__ import annotations

from typing import Any

from overlord.overlord_errors import OverlordError, druid_error

__all__ = ["QueryError"]

_CATEGORIES = {"QUERY_TIMEOUT": "TIMEOUT", "QUERY_CANCELLED": "CANCELED", "RESULT_TOO_LARGE": "CAPACITY_EXCEEDED",
               "QUERY_CAPACITY_EXCEEDED": "CAPACITY_EXCEEDED", "QUERY_ENGINE_KILLS": "CAPACITY_EXCEEDED"}
"""Druid's error category of the classes that are not plain invalid input."""


class QueryError(OverlordError):
    """A query that did not run, with the engine's message and error class.

    A user error (HTTP 400) unless ``status`` says otherwise (429: too many queries, 503: the
    query engine is restarting). ``retry_after``: seconds, sent as ``Retry-After``.
    """

    def __init__(self, message: str, error_class: str | None = None, status: int = 400,
                 retry_after: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.error_class = error_class
        self.status = status
        self.retry_after = retry_after

    def to_druid(self) -> dict[str, Any]:
        """The body Druid returns with :attr:`status` for a query that did not run."""
        return druid_error(self.status, self.message, category=_CATEGORIES.get(self.error_class or ""),
                           context={"errorClass": self.error_class} if self.error_class else {})
