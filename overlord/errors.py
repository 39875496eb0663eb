"""Errors of the overlord."""

__all__ = ["NotFound", "OverlordError"]


class OverlordError(Exception):
    """Root of the overlord's errors."""


class NotFound(OverlordError):
    """No supervisor or task with that id (HTTP 404)."""
