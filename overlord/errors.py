"""Errors of the overlord."""

__all__ = ["NotFound", "NotLeader", "OverlordError", "error_summary"]


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
