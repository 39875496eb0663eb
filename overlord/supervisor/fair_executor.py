"""A fixed number of worker threads shared fairly: waiting work is taken in turn from each owner.

The overlord's task slots run every datasource's tasks. First come, first served would let one
supervisor that plans hundreds of tasks at once (``taskCount`` x ``replicas``) hold every other
datasource's next task back until all of its own have run; here the next free slot goes to the
owner whose turn it is (round robin over owners with waiting work), so another datasource's task
waits for at most one task of each other owner.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

__all__ = ["FairExecutor"]

T = TypeVar("T")

_Work = tuple[Future[Any], Callable[[], Any]]


class FairExecutor:
    """Runs submitted callables on ``workers`` threads, taking turns between owners."""

    def __init__(self, workers: int, thread_name_prefix: str = "worker") -> None:
        self._waiting: OrderedDict[str, deque[_Work]] = OrderedDict()
        self._ready = threading.Condition()
        self._closed = False
        self._running = 0
        self._threads = [threading.Thread(target=self._work, name=f"{thread_name_prefix}_{i}", daemon=True)
                         for i in range(workers)]
        for thread in self._threads:
            thread.start()

    def load(self) -> tuple[int, int, int]:
        """(workers, work running, work waiting for a worker)."""
        with self._ready:
            return len(self._threads), self._running, sum(len(queue) for queue in self._waiting.values())

    def submit(self, owner: str, fn: Callable[[], T]) -> Future[T]:
        """Run ``fn`` when a worker is free and it is ``owner``'s turn; its future (cancellable until it runs)."""
        future: Future[T] = Future()
        with self._ready:
            if self._closed:
                raise RuntimeError("the executor has shut down")
            self._waiting.setdefault(owner, deque()).append((future, fn))
            self._ready.notify()
        return future

    def _next(self) -> _Work | None:
        """The head of the first owner's queue (that owner then goes last); None once shut down."""
        with self._ready:
            while not self._waiting and not self._closed:
                self._ready.wait()
            if not self._waiting:
                return None
            owner, queue = next(iter(self._waiting.items()))
            work = queue.popleft()
            del self._waiting[owner]
            if queue:
                self._waiting[owner] = queue  # to the back of the line
            return work

    def _work(self) -> None:
        while (work := self._next()) is not None:
            future, fn = work
            if not future.set_running_or_notify_cancel():
                continue
            with self._ready:
                self._running += 1
            try:
                result = fn()
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(result)
            finally:
                with self._ready:
                    self._running -= 1

    def shutdown(self) -> None:
        """Cancel the work that has not started and wait for the running work to end."""
        self.close()
        self.join()

    def close(self) -> None:
        """Take no more work and cancel the work that has not started (the running work goes on)."""
        with self._ready:
            self._closed = True
            waiting = [future for queue in self._waiting.values() for future, _fn in queue]
            self._waiting.clear()
            self._ready.notify_all()
        for future in waiting:
            future.cancel()

    def join(self) -> None:
        """Wait for the running work to end (after :meth:`close`)."""
        for thread in self._threads:
            thread.join()
