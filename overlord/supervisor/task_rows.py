"""Task rows written behind: a task's launch and end are queued and written together, a batch per transaction.

Each indexing task wrote its row twice, at launch and at its end, in a transaction each (~1.7 ms of
the leader's CPU per task, more than a tenth of all it spent on a task). Here both go to a queue
that a thread writes every ``interval_s`` in one transaction: a task that starts and ends between
two writes is one insert, and a burst of tasks a single multi-row statement. Whoever reads task rows
through :class:`overlord.supervisor.metadata_store.MetadataStore` flushes first, so the API never
misses a task; other readers (``sys.tasks``) see them at most ``interval_s`` late. The rows are a
record of what ran, never what a publish relies on: an overlord killed between two writes loses at
most ``interval_s`` of them (its successor marks rows left RUNNING as failed).
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from indexing_task.step_costs import STEP_COSTS

__all__ = ["TaskRows"]

logger = logging.getLogger(__name__)


class TaskRows:
    """Queued writes of the ``tasks`` table, flushed by a thread of their own or on demand."""

    def __init__(self, engine: sa.Engine, table: sa.Table, interval_s: float = 1.0) -> None:
        self.engine = engine
        self.table = table
        self.interval_s = interval_s
        self._inserts: dict[str, dict[str, Any]] = {}
        self._updates: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        """Held while a batch is written: a reader's flush waits for a batch the thread took."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def insert(self, row: dict[str, Any]) -> None:
        """Queue a new row (``created_at`` is now, not when it is written)."""
        with self._lock:
            self._inserts[row["id"]] = {"created_at": datetime.now(UTC), **row}
            self._start()

    def update(self, task_id: str, values: dict[str, Any]) -> None:
        """Queue new values of a row (``finished_at`` is now); merged into its insert if that still waits."""
        values = {"finished_at": datetime.now(UTC), **values}
        with self._lock:
            if task_id in self._inserts:
                self._inserts[task_id].update(values)
            else:
                self._updates.setdefault(task_id, {}).update(values)
            self._start()

    def flush(self) -> None:
        """Write everything queued so far (raises what the database raises; the rows are then queued again)."""
        with self._flushing:
            with self._lock:
                inserts, self._inserts = self._inserts, {}
                updates, self._updates = self._updates, {}
            if not inserts and not updates:
                return
            try:
                with STEP_COSTS.step("task_rows.write"):
                    self._write(list(inserts.values()), updates)
            except BaseException:
                with self._lock:
                    self._inserts = {**inserts, **self._inserts}
                    for task_id, values in updates.items():
                        self._updates[task_id] = {**values, **self._updates.get(task_id, {})}
                raise

    def _write(self, inserts: list[dict[str, Any]], updates: dict[str, dict[str, Any]]) -> None:
        t = self.table.c
        with self.engine.begin() as conn:
            for rows in _by_keys(inserts).values():  # one statement per set of columns given
                conn.execute(self.table.insert(), rows)
            for columns, rows in _by_keys([{"id": task_id, **values} for task_id, values in updates.items()]).items():
                conn.execute(self.table.update().where(t.id == sa.bindparam("id_"))
                             .values({key: sa.bindparam(f"{key}_") for key in columns if key != "id"}),
                             [{f"{key}_": value for key, value in row.items()} for row in rows])

    def close(self) -> None:
        """Write what is queued and stop the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.flush()

    def _start(self) -> None:
        """Start the writing thread on the first queued write (called holding the lock)."""
        if self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(target=self._run, name="task-rows", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.flush()
            except Exception as exc:  # PostgreSQL unreachable: kept, and tried again
                logger.warning("task rows: could not write them (kept for the next try): %s", exc)


def _by_keys(rows: list[dict[str, Any]]) -> dict[tuple[str, ...], list[dict[str, Any]]]:
    """Rows grouped by the columns they give: an executemany sends the same ones for every row."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(sorted(row)), []).append(row)
    return groups
