"""Resident runners: long-lived Spark tasks that index small ranges without a Spark job each.

A trickle's task reads a few hundred records; as its own Spark job it cost ~0.1-0.2 CPU-seconds
of JVM scheduling and a Python worker round trip, more than the work. A resident runner is one
Spark task of a job that runs as long as the overlord: its Python worker connects back to the
driver (``multiprocessing.connection``, authenticated by a key that travels only inside the job's
closure) and serves requests, each the splits of one small task, with the same
:func:`indexing_task.worker.index_splits` a Spark job runs. The driver still publishes, so the
publish rule is unchanged; a runner that dies fails the tasks the job's runners were running (the
supervisor retries them: on a local master one failed Spark task ends the job) and the job is
started again. A task waits its turn for a runner while they come back (a Spark job costs several
small tasks' CPU); once none has come back for ``wait_s`` (each held by a long or stuck task, or
none connected: a peer that connects and stalls the handshake holds the listener up) it runs as a
Spark job instead. Small compactions run on them too (:func:`indexing_task.compaction.compact`).
"""

from __future__ import annotations

import logging
import pickle
import queue
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from multiprocessing.connection import Client, Connection, Listener
from typing import Any

from pyspark.sql import SparkSession

from indexing_task.errors import TaskStopped
from indexing_task.results import WorkerResult
from indexing_task.spark import INGEST_POOL, use_pool
from indexing_task.worker import TaskPayload, freeze_survivors, index_splits

__all__ = ["ResidentRunners", "RunnerLost"]

logger = logging.getLogger(__name__)

_RESTART_DELAY_S = 5.0


class RunnerLost(RuntimeError):
    """The resident runner indexing a task went away (its worker died); the task is retried."""


class ResidentRunners:
    """``count`` resident runners on ``spark``; :meth:`run` hands one a small task's splits."""

    def __init__(self, spark: SparkSession, count: int) -> None:
        self.spark = spark
        self.count = count
        self._key = secrets.token_bytes(32)
        self.job_group = f"resident-runners-{secrets.token_hex(4)}"
        host = spark.sparkContext.getConf().get("spark.driver.host") or "127.0.0.1"
        self._listener = Listener((host, 0), authkey=self._key)
        self._idle: queue.Queue[Connection] = queue.Queue()
        self._closed = threading.Event()
        self.restart_delay_s = _RESTART_DELAY_S
        self.wait_s = 1.0
        """How long no runner may come back before a waiting task runs as a Spark job (a costlier way than a wait)."""
        self._came_back = time.monotonic()
        """When a runner last came back from a task, or connected."""
        for target, name in ((self._accept, "resident-accept"), (self._keep_running, "resident-job")):
            threading.Thread(target=target, name=name, daemon=True).start()

    @property
    def idle(self) -> int:
        """How many runners are connected and waiting for work."""
        return self._idle.qsize()

    def run(self, payload: TaskPayload, splits: Sequence[int], stop: threading.Event | None = None
            ) -> list[WorkerResult] | None:
        """Index ``payload``'s ``splits`` on a runner; None if none comes back in time (run a Spark job).

        Raises what the runner raised, :class:`RunnerLost`, or :class:`TaskStopped` if ``stop`` is set while
        the task waits for a runner.
        """
        return self.call(payload.task_id, partial(_index, payload, tuple(splits)), stop)

    def call(self, task_id: str, work: Callable[[], list[WorkerResult]], stop: threading.Event | None = None
             ) -> list[WorkerResult] | None:
        """``work()`` (a picklable call of a module-level function) on a runner, for task ``task_id``.

        None if no runner comes back in time; raises as :meth:`run` does.
        """
        conn = self._next_idle(task_id, stop)
        if conn is None:
            return None
        try:
            conn.send((task_id, work))
            ok, value = conn.recv()
        except (EOFError, OSError) as exc:
            conn.close()
            raise RunnerLost(f"task {task_id}: its resident runner went away ({exc!r}); nothing was "
                             "published") from None
        self._came_back = time.monotonic()
        self._idle.put(conn)
        if not ok:
            raise value
        return list(value)

    def _next_idle(self, task_id: str, stop: threading.Event | None) -> Connection | None:
        """The next idle runner, in turn; None once no runner has come back for ``wait_s``, or they are closed."""
        while True:
            if stop is not None and stop.is_set():
                raise TaskStopped(f"task {task_id} was stopped while it waited for a resident runner; nothing was "
                                  "published")
            try:
                return self._idle.get(timeout=self.wait_s)
            except queue.Empty:
                if self._closed.is_set() or time.monotonic() - self._came_back >= self.wait_s:
                    return None

    def close(self) -> None:
        """Stop the runners: their job ends, idle ones at once, busy ones after their task."""
        self._closed.set()
        threading.Thread(target=self._wake_acceptor, name="resident-close", daemon=True).start()
        while True:
            try:
                conn = self._idle.get_nowait()
            except queue.Empty:
                break
            try:
                conn.send(None)
            except OSError:
                pass
            conn.close()
        try:
            self.spark.sparkContext.cancelJobGroup(self.job_group)
        except Exception:  # the JVM is gone already
            pass

    def _wake_acceptor(self) -> None:
        """Connect to the listener so that its thread sees it is closed (not waited for: a stalled peer may hold it)."""
        try:
            Client(self._listener.address, authkey=self._key).close()
        except Exception:  # noqa: S110 - already closed or refused: the thread stops either way
            pass
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                conn = self._listener.accept()
            except OSError:  # closed
                return
            except Exception as exc:  # a caller without the key
                logger.warning("resident runners: refused a connection: %r", exc)
                continue
            if self._closed.is_set():
                conn.close()
                return
            self._came_back = time.monotonic()
            self._idle.put(conn)

    def _keep_running(self) -> None:
        """Run the runners' job, and again whenever it ends, until closed."""
        sc = self.spark.sparkContext
        address = self._listener.address
        while not self._closed.is_set():
            sc.setJobGroup(self.job_group, f"{self.count} resident runner(s) for small tasks",
                           interruptOnCancel=True)
            use_pool(self.spark, INGEST_POOL)
            try:
                sc.parallelize(range(self.count), self.count).mapPartitions(
                    partial(_serve, address, self._key)).collect()
            except Exception as exc:
                if self._closed.is_set() or sc._jsc is None:
                    return
                logger.warning("resident runners: their job ended (%s); starting it again in %.0f s",
                               str(exc).splitlines()[0] if str(exc) else repr(exc), self.restart_delay_s)
            self._closed.wait(self.restart_delay_s)


def _index(payload: TaskPayload, splits: tuple[int, ...]) -> list[WorkerResult]:
    return [index_splits(payload, [payload.splits[i] for i in splits])]


def _serve(address: Any, key: bytes, _indexes: Iterator[int]) -> Iterator[str]:
    """A runner's Spark task: run the work the driver sends until it sends None or goes away."""
    with Client(address, authkey=key) as conn:
        while True:
            try:
                request = conn.recv()
            except (EOFError, OSError):
                break
            if request is None:
                break
            task_id, work = request
            started = time.monotonic()
            try:
                reply: tuple[bool, Any] = (True, work())
            except Exception as exc:
                reply = (False, exc)
            try:
                try:
                    conn.send(reply)
                except (pickle.PicklingError, TypeError, AttributeError):  # an exception that does not pickle
                    conn.send((False, RuntimeError(f"{type(reply[1]).__name__}: {reply[1]}")))
            except (EOFError, OSError):
                break
            logger.debug("task %s: %.3f s on a resident runner", task_id, time.monotonic() - started)
            freeze_survivors()
    return iter(())
