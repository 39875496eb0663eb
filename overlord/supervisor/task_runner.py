"""Runs tasks (indexing, compaction) on the shared SparkSession, each in a driver thread of its own."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

import sqlalchemy as sa
from pyspark.sql import SparkSession

from indexing_task.group_commit import GroupCommit
from indexing_task.low_priority import LowPriorityProcesses
from indexing_task.resident import ResidentRunners
from indexing_task.spark import INGEST_POOL, use_pool
from indexing_task.step_costs import STEP_COSTS
from indexing_task.task import BeforePublish, IndexTaskRequest, TaskReport, run_index_task
from overlord.supervisor.fair_executor import FairExecutor
from overlord.supervisor.task_logs import TaskLogs

__all__ = ["TaskRunner"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


def _nothing(_task_id: str) -> None:
    pass


class TaskRunner:
    """Submits tasks as Spark jobs (one job group per task id) and stops them on request.

    A stopped task's Spark job is cancelled and the task never publishes (or swaps): its stop
    event is checked between writing its files and its metadata transaction. Slots go to the
    datasources with waiting tasks in turn (:class:`FairExecutor`). Compactions have slots of
    their own (Druid's ``maxCompactionTaskSlots``): a pass over many datasources queues behind
    them and never takes the slots that keep ingestion fresh.
    """

    def __init__(self, spark: SparkSession, engine: sa.Engine, slots: int = 8,
                 before_publish: BeforePublish | None = None, resident_runners: int = 0,
                 compaction_slots: int = 1) -> None:
        self.spark = spark
        self.engine = engine
        self.before_publish = before_publish
        self.resident = ResidentRunners(spark, resident_runners) if resident_runners else None
        self._pool = FairExecutor(slots, thread_name_prefix="task")
        self._compaction_pool = FairExecutor(compaction_slots, thread_name_prefix="compaction")
        self.background = LowPriorityProcesses(compaction_slots)
        """Where small compactions merge (one process per compaction slot, started when first needed)."""
        self.publisher = GroupCommit(engine)
        """Publishes the indexing tasks that finish together in one transaction."""
        self.logs = TaskLogs()
        """Each task's log lines (see :mod:`overlord.supervisor.task_logs`); its owner puts it on the root logger."""
        self._stops: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def slot_use(self) -> dict[str, tuple[int, int, int]]:
        """(slots, tasks running in them, tasks waiting for one) of the ``task`` and ``compaction_task`` slots."""
        return {"task": self._pool.load(), "compaction_task": self._compaction_pool.load()}

    def resident_use(self) -> tuple[int, int]:
        """(requests sent to the resident runners, tasks in them): more tasks than requests when tasks go together."""
        if self.resident is None:
            return 0, 0
        return self.resident.requests_sent, self.resident.tasks_sent

    def spark_alive(self) -> bool:
        """Whether ingestion's Spark application still runs (its JVM answers and its context is not stopped)."""
        try:
            return not self.spark.sparkContext._jsc.sc().isStopped()
        except Exception:  # the JVM is gone: py4j cannot reach it
            return False

    def submit(self, request: IndexTaskRequest, on_done: Callable[[str], None],
               on_start: Callable[[str], None] = _nothing,
               extend: Callable[[IndexTaskRequest], IndexTaskRequest] | None = None) -> Future[TaskReport]:
        """Run an indexing task when a slot is free.

        ``on_start(task_id)`` is called when it starts running, ``on_done(task_id)`` when it has
        finished, however (a task cancelled before it started included). ``extend(request)`` gives
        the range it reads once it starts (same start; an end as late as the records then allow).
        """
        def work(stop: threading.Event) -> TaskReport:
            final = extend(request) if extend is not None else request
            return run_index_task(self.spark, self.engine, final, stop, self.before_publish, self.resident,
                                  self.publisher)

        return self.submit_work(request.task_id, f"indexing task {request.task_id}", work, on_done, on_start,
                                owner=request.spec.datasource, job_group=False)

    def submit_work(self, task_id: str, description: str, work: Callable[[threading.Event], T],
                    on_done: Callable[[str], None] = _nothing, on_start: Callable[[str], None] = _nothing,
                    owner: str | None = None, compaction: bool = False, job_group: bool = True) -> Future[T]:
        """Run ``work(stop_event)`` as task ``task_id``: its Spark jobs form the task's job group.

        ``owner`` (a datasource; the task itself if None) takes its turn for a slot with the others:
        a compaction slot if ``compaction``, else a task slot. Without ``job_group`` the work sets the
        job group itself before its first Spark job (an indexing task on a resident runner has none: two
        py4j round trips saved).
        """
        stop = threading.Event()
        with self._lock:
            self._stops[task_id] = stop
        self.logs.open(task_id)

        def run() -> T:
            with STEP_COSTS.step("task.run"):
                with STEP_COSTS.step("task.start"):
                    on_start(task_id)
                    if job_group:
                        self.spark.sparkContext.setJobGroup(task_id, description, interruptOnCancel=True)
                        use_pool(self.spark, INGEST_POOL)
                with self.logs.running(task_id):
                    return work(stop)

        pool = self._compaction_pool if compaction else self._pool
        future = pool.submit(owner or task_id, run)
        future.add_done_callback(lambda _f: self._finished(task_id, on_done))
        return future

    def _finished(self, task_id: str, on_done: Callable[[str], None]) -> None:
        with STEP_COSTS.step("task.done"):
            with self._lock:
                self._stops.pop(task_id, None)
            try:
                on_done(task_id)
            except Exception:
                logger.exception("task %s: completion callback failed", task_id)

    def stop(self, task_id: str) -> bool:
        """Stop a running task: it will not publish. Returns False if it is not running."""
        with self._lock:
            stop = self._stops.get(task_id)
        if stop is None:
            return False
        stop.set()
        self.spark.sparkContext.cancelJobGroup(task_id)
        logger.info("task %s: stop requested", task_id)
        return True

    def shutdown(self) -> None:
        """Cancel every waiting task, stop the running ones and wait for their threads to end.

        Both pools close first: a waiting task never takes the slot a stopped one frees.
        """
        pools = (self._pool, self._compaction_pool)
        for pool in pools:
            pool.close()
        self.stop_all()
        if self.resident is not None:
            self.resident.close()
        self.background.close()
        for pool in pools:
            pool.join()
        self.publisher.close()

    def stop_all(self) -> None:
        """Stop every task, indexing and compaction, running or waiting: none of them publishes or swaps."""
        with self._lock:
            tasks = list(self._stops)
        for task_id in tasks:
            self.stop(task_id)
