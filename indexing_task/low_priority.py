"""Background work in processes of its own at a low CPU priority: it takes only the CPU ingestion leaves.

Small compactions run here instead of on a resident runner or as a Spark job: on a runner, a merge
held the runner that the next indexing task waited for; as a job, it cost a core for 1-2 s, most
of it the job's own. A process that dies (killed, out of memory) fails the work running in the
pool then (one merge with the default one compaction slot), never an indexing task; the pool is
made again for the next.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

from indexing_task.child_processes import die_with_parent

__all__ = ["NICENESS", "LowPriorityProcesses"]

T = TypeVar("T")

NICENESS = 10
"""How much nicer than the overlord the processes are: under load they get ~1/10 of a core's share."""


class LowPriorityProcesses:
    """Up to ``workers`` spawned processes, started when first needed and kept for the next work."""

    def __init__(self, workers: int) -> None:
        self._workers = workers
        self._lock = threading.Lock()
        self._pool = self._new_pool()

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(self._workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_start_low_priority)

    def submit(self, work: Callable[[], T]) -> Future[T]:
        """Run ``work`` (picklable: a module-level function or a partial of one) in one of the processes."""
        with self._lock:
            try:
                return self._pool.submit(work)
            except BrokenProcessPool:  # a process died: its work failed, the next gets new processes
                self._pool = self._new_pool()
                return self._pool.submit(work)

    def close(self) -> None:
        """Cancel the work that has not started; a process finishes its current work, then exits."""
        with self._lock:
            self._pool.shutdown(wait=False, cancel_futures=True)


def _start_low_priority() -> None:
    """Each process's first step: run at :data:`NICENESS`, and exit with the overlord."""
    os.nice(NICENESS)
    die_with_parent()
