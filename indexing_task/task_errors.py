"""Errors of the indexing task."""

__all__ = ["IndexingError", "RangeNotReadableError", "SchemaRegistryUnavailable", "TaskStopped", "TooManyParseErrors"]


class IndexingError(Exception):
    """Root of the indexing task's errors."""


class RangeNotReadableError(IndexingError):
    """A partition's range could not be read to its end (missing records, broker error)."""


class TooManyParseErrors(IndexingError):
    """More bad records than ``tuningConfig.maxParseExceptions`` allows."""


class TaskStopped(IndexingError):
    """The task was asked to stop (shutdown, reset, shutdown request) and did not publish."""


class SchemaRegistryUnavailable(IndexingError):
    """The schema registry could not answer (down, 5xx, refused credentials): the task does not publish."""
