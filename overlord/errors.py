"""Errors of the overlord."""

__all__ = ["NotFound", "NotLeader", "OverlordError"]


class OverlordError(Exception):
    """Root of the overlord's errors."""


class NotFound(OverlordError):
    """No supervisor or task with that id (HTTP 404)."""


class NotLeader(OverlordError):
    """This overlord is a standby: the call changes state only the leader may change (HTTP 503)."""
