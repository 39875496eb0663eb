"""Errors of the overlord."""

from typing import Any

__all__ = ["NotFound", "NotLeader", "OverlordError", "druid_error", "error_summary"]


class OverlordError(Exception):
    """Root of the overlord's errors."""


class NotFound(OverlordError):
    """No supervisor or task with that id (HTTP 404)."""


class NotLeader(OverlordError):
    """This overlord is a standby: the call changes state only the leader may change (HTTP 503)."""


def error_summary(error: BaseException, lines: int = 3, limit: int = 1_000) -> str:
    """``Type: message``, cut to its first lines: a Spark error carries the whole Java stack trace."""
    head = " | ".join(line.strip() for line in f"{type(error).__name__}: {error}".strip().splitlines()[:lines])
    return head if len(head) <= limit else head[:limit] + "…"


_CATEGORIES = {400: ("invalidInput", "INVALID_INPUT"), 401: ("unauthorized", "UNAUTHORIZED"),
               403: ("forbidden", "FORBIDDEN"), 404: ("notFound", "NOT_FOUND"), 405: ("unsupported", "UNSUPPORTED"),
               413: ("capacityExceeded", "CAPACITY_EXCEEDED"), 503: ("notLeader", "RUNTIME_FAILURE")}


def druid_error(status: int, message: str, *, category: str | None = None,
                context: dict[str, Any] | None = None) -> dict[str, Any]:
    """Druid's error body for an HTTP ``status``; Druid's clients read ``errorMessage`` (pydruid).

    Keys: ``error`` (``druidException``), ``errorCode``, ``persona``, ``category``,
    ``errorMessage`` and ``context``.
    """
    code, default_category = _CATEGORIES.get(status, ("invalidInput", "INVALID_INPUT") if status < 500
                                             else ("internalError", "RUNTIME_FAILURE"))
    return {"error": "druidException", "errorCode": code, "persona": "USER" if status < 500 else "OPERATOR",
            "category": category or default_category, "errorMessage": message, "context": context or {}}
