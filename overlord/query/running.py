"""Queries while they run: each one's Spark jobs as a job group with a deadline, cancellable by id.

Druid's ``DELETE /druid/v2/sql/{sqlQueryId}`` cancels a running query; so does its timeout. A
cancel repeats until the query has returned: a job that starts after a cancel is not cancelled
by it.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Literal

from pyspark.sql import SparkSession

from indexing_task.spark import QUERY_POOL, use_pool
from overlord.query.query_errors import QueryError

__all__ = ["RunningQuery", "cancel_query", "running_query"]

Reason = Literal["timeout", "cancelled"]

_running: dict[str, RunningQuery] = {}
_lock = threading.Lock()


class RunningQuery:
    """One running query: why it was stopped, if it was."""

    def __init__(self, spark: SparkSession, query_id: str) -> None:
        self.query_id = query_id
        self.reason: Reason | None = None
        self._spark, self._context = spark, spark.sparkContext
        self._job_group = f"sql_{uuid.uuid4().hex[:12]}"
        self._finished = threading.Event()
        self._interrupts: list[Callable[[], None]] = []
        self.timeout_at: float | None = None
        """When its timeout is up (``time.monotonic``), once it runs."""

    def stop(self, reason: Reason) -> None:
        """Cancel the query's jobs until it returns (in a thread of its own); the first reason stays."""
        with _lock:
            if self.reason is not None:
                return
            self.reason = reason
        threading.Thread(target=self._cancel_until_finished, name=f"cancel-{self.query_id}", daemon=True).start()

    def interrupt_with(self, interrupt: Callable[[], None]) -> None:
        """Also call ``interrupt`` to stop the query (work outside Spark: a DuckDB cursor's ``interrupt``)."""
        with _lock:
            self._interrupts.append(interrupt)
            stopped = self.reason is not None
        if stopped:
            interrupt()

    def _cancel_until_finished(self) -> None:
        while not self._finished.is_set():
            self._context.cancelJobGroup(self._job_group)
            with _lock:
                interrupts = list(self._interrupts)
            for interrupt in interrupts:
                interrupt()
            self._finished.wait(0.5)

    def begin(self) -> None:
        """Make this thread's next Spark jobs the query's: its job group, in the ``query`` pool."""
        self._context.setJobGroup(self._job_group, f"SQL query {self.query_id}", interruptOnCancel=True)
        use_pool(self._spark, QUERY_POOL)

    def left_s(self) -> float | None:
        """Seconds left before its timeout (None: no timeout)."""
        return None if self.timeout_at is None else max(0.0, self.timeout_at - time.monotonic())

    def end(self) -> None:
        """The query has returned: stop cancelling."""
        self._finished.set()


@contextmanager
def running_query(spark: SparkSession, query_id: str, timeout_s: float) -> Iterator[RunningQuery]:
    """Run the block's Spark jobs as the query ``query_id`` in the ``query`` pool, stopped after ``timeout_s``."""
    query = RunningQuery(spark, query_id)
    with _lock:
        if query_id in _running:
            raise QueryError(f"a query with sqlQueryId {query_id!r} is already running", "QUERY_ID_IN_USE")
        _running[query_id] = query
    timer = threading.Timer(timeout_s, query.stop, ["timeout"])
    timer.daemon = True
    try:
        query.begin()
        query.timeout_at = time.monotonic() + timeout_s
        timer.start()
        yield query
    finally:
        query.end()
        timer.cancel()
        with _lock:
            del _running[query_id]


def cancel_query(query_id: str) -> bool:
    """Cancel the running query ``query_id``; False if no such query is running."""
    with _lock:
        query = _running.get(query_id)
    if query is None:
        return False
    query.stop("cancelled")
    return True
