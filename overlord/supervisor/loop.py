"""One supervisor: keeps a datasource ingesting from its topic, one fixed-range task at a time per group.

The run loop (:meth:`Supervisor.run_once`) is a flat list of named steps, after Druid's
``runInternal``: refresh partitions and latest offsets -> update task status -> compute
lag -> create new tasks. Task groups are ``partition % taskCount``; each group has at most
one task range in flight, run by ``replicas`` identical tasks of which the first to publish
wins and the others lose the start-offset check (counted, not an error). A task covers
``[committed, latest at launch)`` of its group's partitions: its end offsets are fixed when
it is launched, and a new one is cut every ``period`` while there is lag.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from indexing_task.task import IndexTaskRequest, TaskReport
from indexing_task.watermarks import topic_watermarks
from overlord.config import Settings
from overlord.supervisor.metadata_store import MetadataStore
from overlord.supervisor.task_runner import TaskRunner
from segment_store import committed_offsets, reset_offsets
from specs import SupervisorSpec

__all__ = ["Supervisor", "SupervisorContext"]

logger = logging.getLogger(__name__)

UNHEALTHY_AFTER = 3
"""Consecutive failed runs (or failed tasks) before the supervisor reports itself unhealthy."""
BACKOFF_BASE_S = 2.0
BACKOFF_CAP_S = 300.0


@dataclass(frozen=True)
class SupervisorContext:
    """What every supervisor shares: the stores, the task runner and how to wake a supervisor."""

    engine: sa.Engine
    store: MetadataStore
    runner: TaskRunner
    settings: Settings
    wake: Callable[[str], None]


@dataclass
class ActiveTask:
    request: IndexTaskRequest
    future: Future[TaskReport]
    group: int
    started: float
    started_at: datetime


@dataclass
class GroupState:
    failures: int = 0
    retry_after: float = 0.0


@dataclass
class Counters:
    processed: int = 0
    unparseable: int = 0
    thrown_away: int = 0
    lost_publish_races: int = 0
    samples: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=512))

    def rate(self, now: float, window_s: float) -> float:
        """Processed records per second over the last ``window_s`` seconds."""
        recent = [(t, n) for t, n in self.samples if now - t <= window_s]
        return sum(n for _, n in recent) / window_s if recent else 0.0


class Supervisor:
    def __init__(self, supervisor_id: str, spec: SupervisorSpec, suspended: bool, ctx: SupervisorContext,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.id = supervisor_id
        self.spec = spec
        self.suspended = suspended
        self.stopping = False
        self.ctx = ctx
        self.clock = clock
        self.lock = threading.RLock()
        self.active: dict[str, ActiveTask] = {}
        self.groups: dict[int, GroupState] = {}
        self.counters = Counters()
        self.recent_errors: deque[dict[str, str]] = deque(maxlen=10)
        self.recent_tasks: deque[dict[str, Any]] = deque(maxlen=20)
        self.latest: dict[int, int] = {}
        self.earliest: dict[int, int] = {}
        self.committed: dict[int, int] = {}
        self.stored_topic: str | None = None
        self.offsets_updated: datetime | None = None
        self.failed_runs = 0
        self.detailed_state = "PENDING"

    # --- the run loop ----------------------------------------------------------------------

    def run_once(self) -> None:
        """One pass of the loop; failures are recorded, never raised (the next pass retries)."""
        with self.lock:
            try:
                self.refresh_partitions()
                self.update_task_status()
                self.compute_lag()
                self.create_new_tasks()
                self.failed_runs = 0
            except Exception as exc:  # broker or PostgreSQL unreachable, and the like
                self.failed_runs += 1
                self.detailed_state = "UNABLE_TO_CONNECT"
                self._record_error(f"{type(exc).__name__}: {exc}")
                logger.warning("supervisor %s: run failed (%d in a row): %s", self.id, self.failed_runs, exc)

    def refresh_partitions(self) -> None:
        io = self.spec.spec.io_config
        marks = topic_watermarks(self._consumer_properties(), io.topic)
        self.earliest = {p: low for p, (low, _) in marks.items()}
        self.latest = {p: high for p, (_, high) in marks.items()}
        self.offsets_updated = datetime.now(UTC)

    def update_task_status(self) -> None:
        timeout = self.spec.spec.io_config.completion_timeout.total_seconds()
        for task_id, task in list(self.active.items()):
            if task.future.done():
                del self.active[task_id]
                self._handle_finished(task)
            elif self.clock() - task.started > timeout:
                self.ctx.runner.stop(task_id)
                self._record_error(f"task {task_id} exceeded completionTimeout ({timeout:.0f}s); stopped")

    def compute_lag(self) -> None:
        stored = committed_offsets(self.ctx.engine, self.spec.datasource)
        topic = self.spec.spec.io_config.topic
        self.stored_topic = stored.topic if stored is not None else None
        self.committed = dict(stored.offsets) if stored is not None else {}
        if self.stored_topic not in (None, topic):
            raise RuntimeError(f"datasource {self.spec.datasource!r}: expected committed offsets of topic {topic!r}, "
                               f"found offsets of {self.stored_topic!r}; reset the supervisor to read the new topic")

    def create_new_tasks(self) -> None:
        if self.suspended or self.stopping:
            self.detailed_state = "SUSPENDED" if self.suspended else "STOPPING"
            return
        io = self.spec.spec.io_config
        busy = {p for task in self.active.values() for p in task.request.start_offsets}
        self._pin_initial_offsets()
        launched = 0
        for group in range(io.task_count):
            partitions = [p for p in sorted(self.latest) if p % io.task_count == group]
            state = self.groups.setdefault(group, GroupState())
            if not partitions or busy.intersection(partitions) or self.clock() < state.retry_after:
                continue
            start = {p: self.committed[p] for p in partitions}
            end = {p: max(start[p], self.latest[p]) for p in partitions}
            if end != start:
                self._launch(group, start, end)
                launched += 1
        self.detailed_state = "RUNNING" if self.active else "IDLE"

    # --- helpers ---------------------------------------------------------------------------

    def _pin_initial_offsets(self) -> None:
        """Commit where new partitions start (earliest or latest, per the spec) before the first task.

        Pinning makes "latest" mean the latest offset when the partition was first seen, not
        whenever a failed first task happens to be retried.
        """
        io = self.spec.spec.io_config
        source = self.earliest if io.use_earliest_offset else self.latest
        new = {p: source[p] for p in self.latest if p not in self.committed}
        if new:
            reset_offsets(self.ctx.engine, self.spec.datasource, new)
            self.committed.update(new)
            logger.info("supervisor %s: partitions %s start at %s offsets %s", self.id, sorted(new),
                        "earliest" if io.use_earliest_offset else "latest", new)

    def _launch(self, group: int, start: dict[int, int], end: dict[int, int]) -> None:
        stored = committed_offsets(self.ctx.engine, self.spec.datasource)
        base = f"index_kafka_{self.spec.datasource}_{group}_{uuid.uuid4().hex[:8]}"
        for replica in range(self.spec.spec.io_config.replicas):
            request = IndexTaskRequest(
                task_id=f"{base}_r{replica}", spec=self.spec, start_offsets=start, end_offsets=end,
                initial_offsets=start, deep_storage=self.ctx.settings.deep_storage,
                generation=stored.version if stored is not None else 0,
                bootstrap_servers=self.ctx.settings.kafka_bootstrap_servers)
            self.ctx.store.insert_task(request.task_id, self.id, self.spec.datasource, start, end)
            future = self.ctx.runner.submit(request, lambda _task_id: self.ctx.wake(self.id))
            self.active[request.task_id] = ActiveTask(request, future, group, self.clock(), datetime.now(UTC))
            logger.info("supervisor %s: launched task %s for partitions %s: %s -> %s", self.id,
                        request.task_id, sorted(start), start, end)

    def _handle_finished(self, task: ActiveTask) -> None:
        task_id, state = task.request.task_id, self.groups.setdefault(task.group, GroupState())
        error = task.future.exception()
        report = None if error is not None else task.future.result()
        if report is not None and report.outcome.ok:
            status, detail = "SUCCESS", "published"
            state.failures = 0
            self.counters.processed += report.processed
            self.counters.unparseable += report.unparseable
            self.counters.thrown_away += report.thrown_away
            self.counters.samples.append((self.clock(), report.processed))
        elif report is not None and all(report.outcome.committed.get(p, -1) >= o
                                        for p, o in task.request.end_offsets.items()):
            status, detail = "SUCCESS", "another replica published this range first"
            self.counters.lost_publish_races += 1
        else:
            status = "FAILED"
            detail = (f"publish {report.outcome.status}: {report.outcome.message}" if report is not None
                      else f"{type(error).__name__}: {error}")
            state.failures += 1
            delay = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (state.failures - 1))
            state.retry_after = self.clock() + delay
            self._record_error(f"task {task_id}: {detail} (retrying in {delay:.0f}s)")
        self.ctx.store.finish_task(task_id, status, detail, _report_json(report))
        self.recent_tasks.appendleft({
            "id": task_id, "status": status, "statusDetail": detail,
            "startOffsets": {str(p): o for p, o in task.request.start_offsets.items()},
            "endOffsets": {str(p): o for p, o in task.request.end_offsets.items()},
            "startTime": task.started_at.isoformat(),
            "durationSeconds": round(self.clock() - task.started, 3)})
        log = logger.info if status == "SUCCESS" else logger.warning
        log("supervisor %s: task %s %s: %s", self.id, task_id, status, detail)

    def _record_error(self, message: str) -> None:
        self.recent_errors.appendleft({"timestamp": datetime.now(UTC).isoformat(), "message": message})

    def _consumer_properties(self) -> dict[str, Any]:
        properties = dict(self.spec.spec.io_config.consumer_properties)
        if self.ctx.settings.kafka_bootstrap_servers and "bootstrap.servers" not in properties:
            properties["bootstrap.servers"] = self.ctx.settings.kafka_bootstrap_servers
        return properties

    # --- what the API shows ----------------------------------------------------------------

    @property
    def state(self) -> str:
        if self.stopping:
            return "STOPPING"
        if self.suspended:
            return "SUSPENDED"
        if self.failed_runs >= UNHEALTHY_AFTER:
            return "UNHEALTHY_SUPERVISOR"
        if any(g.failures >= UNHEALTHY_AFTER for g in self.groups.values()):
            return "UNHEALTHY_TASKS"
        return "PENDING" if self.offsets_updated is None else "RUNNING"

    @property
    def idle(self) -> bool:
        """No task in flight and free to launch one: worth checking the topic again soon."""
        return not self.active and not self.suspended and not self.stopping

    @property
    def healthy(self) -> bool:
        return self.state not in ("UNHEALTHY_SUPERVISOR", "UNHEALTHY_TASKS")

    def lag(self) -> dict[int, int]:
        return {p: max(0, self.latest[p] - self.committed.get(p, self.latest[p])) for p in self.latest}


def _report_json(report: TaskReport | None) -> dict[str, Any] | None:
    if report is None:
        return None
    return {"records": report.records, "processed": report.processed, "unparseable": report.unparseable,
            "thrownAway": report.thrown_away, "rowsOut": report.rows_out, "segments": len(report.segments),
            "publish": report.outcome.status, "publishMessage": report.outcome.message,
            "indexSeconds": round(report.index_seconds, 3), "publishSeconds": round(report.publish_seconds, 3),
            "badSamples": list(report.bad_samples)}
