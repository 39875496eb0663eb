"""A supervisor's recent errors: the same error once, with a count, until the supervisor recovers.

A failing task is retried with backoff, so one cause repeats every few seconds under new task
ids; listed once per occurrence it pushed every other error out of view. An error is kept with
its first and last time and how often it came; once the supervisor recovers (a task published,
or a run succeeded after failed ones) it is marked resolved and shown apart, not forgotten.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from dataclasses import dataclass
from datetime import datetime

__all__ = ["RecentErrors", "SeenError"]


@dataclass
class SeenError:
    """One error: its latest wording, when it came first and last, how often, and when it was resolved."""

    message: str
    first: datetime
    last: datetime
    count: int = 1
    resolved: datetime | None = None
    run: bool = False
    """Raised by a run of the loop (the broker or PostgreSQL unreachable): a run that succeeds resolves it."""


class RecentErrors:
    """The last ``size`` distinct errors, newest first; ``key`` says which occurrences are the same error."""

    def __init__(self, size: int = 10) -> None:
        self._errors: deque[SeenError] = deque()
        self._open: dict[str, SeenError] = {}
        self._size = size

    def record(self, at: datetime, message: str, key: str | None = None, *, run: bool = False) -> None:
        """Note ``message``; an unresolved error of the same ``key`` (default: the message) is counted again."""
        key = message if key is None else key
        seen = self._open.get(key)
        if seen is not None:
            seen.message, seen.last, seen.count = message, at, seen.count + 1
            self._errors.remove(seen)
        else:
            seen = self._open[key] = SeenError(message, at, at, run=run)
        self._errors.appendleft(seen)
        while len(self._errors) > self._size:
            dropped = self._errors.pop()
            self._open = {k: e for k, e in self._open.items() if e is not dropped}

    def resolve(self, at: datetime, *, run_only: bool = False) -> None:
        """Mark the open errors resolved (only those of failed runs with ``run_only``)."""
        for key, seen in list(self._open.items()):
            if seen.run or not run_only:
                seen.resolved = at
                del self._open[key]

    def snapshot(self) -> tuple[SeenError, ...]:
        """Copies of the errors, newest first."""
        return tuple(dataclasses.replace(e) for e in self._errors)
