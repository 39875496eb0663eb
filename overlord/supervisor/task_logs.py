"""Each task's log: the lines the overlord writes while it runs a task, as Druid serves a task's log.

A logging handler on the root logger keeps, per running task, the records logged on the thread
running it (the task's planning, reading, rollup and publish, from :mod:`indexing_task`) and the
records that name it (``extra={"task_id": ...}``, e.g. the supervisor's launch and outcome
lines); at most :data:`MAX_LINES` per task, the newest. When the task finishes its lines go to
its row in PostgreSQL. Lines pass the same secret scrubbing as the overlord's own log.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["MAX_LINES", "TaskLogs"]

MAX_LINES = 2_000
"""The most lines kept per task (the first ones are dropped past it)."""


class TaskLogs(logging.Handler):
    """Collects the log lines of the tasks :meth:`open` registered, until :meth:`take`."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        self._lines: dict[str, deque[str]] = {}
        self._guard = threading.Lock()
        self._current = threading.local()

    def open(self, task_id: str) -> None:
        """Start keeping ``task_id``'s lines."""
        with self._guard:
            self._lines.setdefault(task_id, deque(maxlen=MAX_LINES))

    @contextmanager
    def running(self, task_id: str) -> Iterator[None]:
        """Lines logged on this thread inside the block are ``task_id``'s."""
        self._current.task_id = task_id
        try:
            yield
        finally:
            self._current.task_id = None

    def emit(self, record: logging.LogRecord) -> None:
        task_id = getattr(record, "task_id", None) or getattr(self._current, "task_id", None)
        if task_id is None:
            return
        line = self.format(record)
        with self._guard:
            if (lines := self._lines.get(task_id)) is not None:
                lines.append(line)

    def text(self, task_id: str) -> str | None:
        """The lines so far of a task still open (None if it is not)."""
        with self._guard:
            lines = self._lines.get(task_id)
            return None if lines is None else "\n".join(lines) + ("\n" if lines else "")

    def take(self, task_id: str) -> str | None:
        """Stop keeping ``task_id``'s lines and return them (None if it was not open)."""
        with self._guard:
            lines = self._lines.pop(task_id, None)
        return None if lines is None else "\n".join(lines) + ("\n" if lines else "")
