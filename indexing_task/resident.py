"""Resident runners: long-lived Spark tasks that index small ranges without a Spark job each.

A trickle's task reads a few hundred records; as its own Spark job it cost ~0.1-0.2 CPU-seconds
of JVM scheduling and a Python worker round trip, more than the work. A resident runner is one
Spark task of a job that runs as long as the overlord: its Python worker connects back to the
driver (``multiprocessing.connection``, authenticated by a key that travels only inside the job's
closure) and serves requests, each the splits of the small tasks waiting then, read together and
then indexed each as a Spark job would (:func:`indexing_task.spark_worker.index_small_tasks`). The
driver still publishes, so the publish rule is unchanged; a runner that dies fails the tasks the
job's runners were running (the supervisor retries them: on a local master one failed Spark task
ends the job) and the job is started again. A task waits its turn for a runner while they come
back (a Spark job costs several small tasks' CPU); once none has come back for ``wait_s`` (each
held by a long or stuck task, or none connected: a peer that connects and stalls the handshake
holds the listener up) it runs as a Spark job instead.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import re
import secrets
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from functools import partial
from multiprocessing.connection import Client, Connection, Listener
from typing import Any

from pyspark.sql import SparkSession

from indexing_task.offset_ranges import Split
from indexing_task.results import WorkerResult
from indexing_task.spark import INGEST_POOL, use_pool
from indexing_task.spark_worker import TaskPayload, freeze_survivors, index_small_tasks
from indexing_task.task_errors import TaskStopped

__all__ = ["ResidentRunners", "RunnerLost"]

logger = logging.getLogger(__name__)

_RESTART_DELAY_S = 5.0
_UNHEALTHY_AFTER = 3
"""The runners' job ended this many times in a row with no runner connecting: they crash-loop."""
_BATCH_RECORDS = 50_000


class RunnerLost(RuntimeError):
    """The resident runner indexing a task went away (its worker died); the task is retried."""


class _Request:
    """A small task waiting for a runner, and then for its result."""

    def __init__(self, payload: TaskPayload, splits: tuple[Split, ...]) -> None:
        self.payload = payload
        self.splits = splits
        self.partitions = {split.kafka(payload.topic)[:2] for split in splits}
        self.records = sum(split.end - split.start for split in splits)
        self.alone = len(self.partitions) < len(splits)
        """Two of its splits read one partition: it is read on its own (ranges read together are of different ones)."""
        shared = {key: value for key, value in payload.consumer_config.items() if key != "group.id"}
        self.reads_with = json.dumps([shared, payload.read_timeout_s], sort_keys=True, default=str)
        """Tasks with the same consumer settings can share a consumer (``group.id`` is never used: no group joins)."""
        self.reply: Future[WorkerResult] = Future()
        self.taken = False


def _check_free_slots(master: str, count: int) -> None:
    """Refuse ``count`` runners that would hold every task slot of a local master: no indexing job could run."""
    local = re.fullmatch(r"local(?:\[(\*|\d+)\])?", master)
    if local is None:
        return  # a cluster's slots are its workers', not known here
    slots = (os.cpu_count() or 1) if local.group(1) == "*" else int(local.group(1) or 1)
    if count >= slots:
        raise ValueError(f"{master} has {slots} task slots and {count} resident runners would hold them all, so no "
                         "indexing job could ever run: start Spark with slots for them (get_spark(..., "
                         "resident_slots=...), as 'overlord serve' does) or set fewer OVERLORD_RESIDENT_RUNNERS")


class ResidentRunners:
    """``count`` resident runners on ``spark``; :meth:`run` hands one a small task's splits.

    Tasks that wait while every runner is busy go to the next free one together (group commit):
    one consumer and one fetch read all their ranges, then each is rolled up, written and returned
    on its own. The oldest waiting task leads; others join if they read with the same consumer
    settings, from other partitions, up to ``batch_records`` records in all.
    """

    def __init__(self, spark: SparkSession, count: int) -> None:
        _check_free_slots(spark.sparkContext.master or "", count)
        self.spark = spark
        self.count = count
        self._key = secrets.token_bytes(32)
        self.job_group = f"resident-runners-{secrets.token_hex(4)}"
        host = spark.sparkContext.getConf().get("spark.driver.host") or "127.0.0.1"
        self._listener = Listener((host, 0), authkey=self._key)
        self._changed = threading.Condition()
        """Guards the idle runners and the waiting tasks; notified when either changes."""
        self._idle: list[Connection] = []
        self._waiting: list[_Request] = []
        self._closed = threading.Event()
        self.restart_delay_s = _RESTART_DELAY_S
        self.wait_s = 1.0
        """How long no runner may come back before a waiting task runs as a Spark job (a costlier way than a wait)."""
        self.batch_records = _BATCH_RECORDS
        self.requests_sent = 0
        self.tasks_sent = 0
        """Requests sent to the runners, and the tasks in them: more tasks than requests when tasks go together."""
        self._came_back = time.monotonic()
        """When a runner last came back from a task, or connected."""
        self._failed_starts = 0
        self._last_error: str | None = None
        for target, name in ((self._accept, "resident-accept"), (self._keep_running, "resident-job")):
            threading.Thread(target=target, name=name, daemon=True).start()

    @property
    def idle(self) -> int:
        """How many runners are connected and waiting for work."""
        with self._changed:
            return len(self._idle)

    def health(self) -> dict[str, Any]:
        """Healthy unless their job has ended :data:`_UNHEALTHY_AFTER` times in a row with no runner connecting."""
        healthy = self._failed_starts < _UNHEALTHY_AFTER
        return {"healthy": healthy, "runners": self.count, "idle": self.idle,
                "error": None if healthy else f"their job ended {self._failed_starts} times in a row before a runner "
                f"connected; the last time: {self._last_error}"}

    def run(self, payload: TaskPayload, splits: Sequence[int], stop: threading.Event | None = None
            ) -> list[WorkerResult] | None:
        """Index ``payload``'s ``splits`` on a runner; None if none comes back in time (run a Spark job).

        Raises what the runner raised, :class:`RunnerLost`, or :class:`TaskStopped` if ``stop`` is set while
        the task waits for a runner.
        """
        request = _Request(payload, tuple(payload.splits[i] for i in splits))
        with self._changed:
            self._waiting.append(request)
        while True:
            with self._changed:
                conn = self._next_idle(request, stop)
                if conn is None:
                    if not request.taken:
                        return None
                    break
                batch = self._take_batch()
            self._send(conn, batch)  # the oldest waiting task's batch: this one's, or one it could not join
        return [request.reply.result()]

    def _next_idle(self, request: _Request, stop: threading.Event | None) -> Connection | None:
        """An idle runner to send the waiting tasks to; None once ``request`` was taken, or must run elsewhere.

        Called holding the lock. Once no runner has come back for ``wait_s`` (or they are closed),
        the request leaves the queue: its task runs as a Spark job.
        """
        while not request.taken:
            if stop is not None and stop.is_set():
                self._waiting.remove(request)
                raise TaskStopped(f"task {request.payload.task_id} was stopped while it waited for a resident "
                                  "runner; nothing was published")
            if self._idle:
                return self._idle.pop(0)
            if self._closed.is_set() or time.monotonic() - self._came_back >= self.wait_s:
                self._waiting.remove(request)
                return None
            self._changed.wait(self.wait_s)
        return None

    def _take_batch(self) -> list[_Request]:
        """The oldest waiting task and those that can be read with it (called holding the lock)."""
        first = self._waiting[0]
        batch, partitions, records = [first], set(first.partitions), first.records
        for request in self._waiting[1:] if not first.alone else ():
            if (request.reads_with == first.reads_with and not request.alone and not partitions & request.partitions
                    and records + request.records <= self.batch_records):
                batch.append(request)
                partitions |= request.partitions
                records += request.records
        for request in batch:
            request.taken = True
            self._waiting.remove(request)
        self._changed.notify_all()
        return batch

    def _send(self, conn: Connection, batch: list[_Request]) -> None:
        """Run ``batch`` on the runner at ``conn`` and hand each task its outcome."""
        label = ",".join(request.payload.task_id for request in batch)
        with self._changed:
            self.requests_sent += 1
            self.tasks_sent += len(batch)
        try:
            conn.send((label, partial(_index, tuple((request.payload, request.splits) for request in batch))))
            ok, value = conn.recv()
        except (EOFError, OSError) as exc:
            conn.close()
            for request in batch:
                request.reply.set_exception(RunnerLost(
                    f"task {request.payload.task_id}: its resident runner went away ({exc!r}); nothing was published"))
            return
        except Exception as exc:  # the work or its reply did not pickle: the connection is still in step
            ok, value = False, exc
        with self._changed:
            self._came_back = time.monotonic()
            self._idle.append(conn)
            self._changed.notify_all()
        for request, outcome in zip(batch, value if ok else [value] * len(batch), strict=True):
            if isinstance(outcome, BaseException):
                request.reply.set_exception(outcome)
            else:
                request.reply.set_result(outcome)

    def close(self) -> None:
        """Stop the runners: their job ends, idle ones at once, busy ones after their task."""
        self._closed.set()
        threading.Thread(target=self._wake_acceptor, name="resident-close", daemon=True).start()
        with self._changed:
            idle, self._idle = self._idle, []
            self._changed.notify_all()
        for conn in idle:
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
            with self._changed:
                self._came_back = time.monotonic()
                self._failed_starts = 0
                self._idle.append(conn)
                self._changed.notify_all()

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
                self._failed_starts += 1
                self._last_error = _last_line(exc)
                logger.warning("resident runners: their job ended (%s); starting it again in %.0f s",
                               self._last_error, self.restart_delay_s)
            self._closed.wait(self.restart_delay_s)


def _last_line(exc: BaseException) -> str:
    """The line of a Spark failure that says why: a Python worker's error is the last line of its traceback."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"^[\w.]+(Error|Exception):", line)]
    return (errors or lines or [repr(exc)])[-1][:500]


def _index(tasks: tuple[tuple[TaskPayload, tuple[Split, ...]], ...]) -> list[WorkerResult | Exception]:
    """Each task's outcome, an error as one the driver can unpickle and raise."""
    outcomes = index_small_tasks(tasks)
    return [outcome if isinstance(outcome, WorkerResult) or _pickles(outcome) else
            RuntimeError(f"{type(outcome).__name__}: {outcome}") for outcome in outcomes]


def _pickles(value: object) -> bool:
    try:
        pickle.loads(pickle.dumps(value))
    except Exception:
        return False
    return True


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
