"""One supervisor: keeps a datasource ingesting from its topic, one fixed-range task at a time per group.

The run loop (:meth:`Supervisor.run_once`) is a flat list of named steps, after Druid's
``runInternal``: update task status -> read committed offsets -> (when a group may launch, or
the watermarks are old) refresh partitions -> check offsets in range -> (unless suspended or
stopping) pin initial offsets -> create new tasks -> publish the status snapshot. Task groups are
``partition % taskCount``; each group has at most one task range in flight, run by
``replicas`` identical tasks of which the first to publish wins and the others find the range
already published (counted, not an error). A task covers ``[committed, latest at launch)`` of
its group's partitions (:mod:`overlord.supervisor.task_ranges`).

The clock, the source of partition watermarks and the policy come from the
:class:`SupervisorContext`, so the loop runs the same against fakes and real components.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from indexing_task.step_costs import STEP_COSTS
from indexing_task.task import IndexTaskRequest, TaskReport
from indexing_task.watermarks import TopicIdSource, partition_topic_ids, stream_topic_ids, stream_watermarks
from overlord.config import Settings
from overlord.overlord_errors import error_summary
from overlord.recent_errors import RecentErrors
from overlord.supervisor.metadata_store import MetadataStore
from overlord.supervisor.policy import SupervisorPolicy
from overlord.supervisor.series import Series
from overlord.supervisor.task_ranges import (
    WatermarkSource,
    committed_for,
    consumer_properties,
    next_range,
    pin_initial_offsets,
    task_group,
)
from overlord.supervisor.task_runner import TaskRunner
from overlord.supervisor_status import (
    ActiveTaskStatus,
    CounterStatus,
    FinishedTaskStatus,
    SupervisorStatus,
)
from segment_store import (
    CommittedOffsets,
    OffsetRange,
    Offsets,
    Partition,
    check_topic_ids,
    committed_offsets,
    kafka_partition,
    skip_offsets,
)
from segment_store.value_types import widest_types
from specs import SupervisorSpec

if TYPE_CHECKING:
    from overlord.metrics import Metrics

__all__ = ["Supervisor", "SupervisorContext"]

logger = logging.getLogger(__name__)


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class SupervisorContext:
    """What every supervisor shares: stores, task runner, policy, clocks and the watermark source."""

    engine: sa.Engine
    store: MetadataStore
    runner: TaskRunner
    settings: Settings
    wake: Callable[[str], None]
    policy: SupervisorPolicy = SupervisorPolicy()
    clock: Callable[[], float] = time.monotonic
    """Monotonic seconds: task timeouts, backoff, rates."""
    now: Callable[[], datetime] = _utc_now
    """Wall-clock time (UTC) for what is shown."""
    watermarks: WatermarkSource = stream_watermarks
    topic_ids: TopicIdSource = stream_topic_ids
    leader_epoch: int | None = None
    """The leader epoch this overlord plans tasks under (checked at publish); None outside leader election."""
    metrics: Metrics | None = None


@dataclass
class ActiveTask:
    request: IndexTaskRequest
    future: Future[TaskReport]
    group: int
    launched: float
    launched_at: datetime
    started: float | None = None
    """When it got a runner slot (monotonic); None while it waits for one."""
    said_waiting: bool = False
    """Whether its long wait for a slot was reported."""


@dataclass
class GroupState:
    failures: int = 0
    retry_after: float = 0.0
    due: float = float("-inf")
    """When it may launch again however few records wait (monotonic; see ``Supervisor._interval``)."""
    flowing: bool = False
    """Its last task published records, fewer than a task read to the end may read: the next reads to the
    end of its partitions, planned without a look at the broker (``Supervisor._to_the_end``); one that
    finds nothing, or that many, ends that."""


EXTEND_AFTER_S = 0.25
"""A task that waited this long for a slot reads up to the latest offsets as it starts (``Supervisor._extended``)."""

TO_THE_END_MAX_RECORDS = 2_000
"""The most a task read to the end reads: a trickle's task is well under it (~250 records), and a runner
takes up to 25 such tasks together (``indexing_task.resident``). One that reads this much found a
backlog: the next is planned with a look at the topic, as large as ``max_records_per_task``."""

RATE_HORIZON_S = 900
"""The longest window a processing rate is given for (15 minutes)."""


@dataclass
class Counters:
    started: float = 0.0
    """When counting began (monotonic): a window reaching back before it counts only the time since."""
    processed: int = 0
    unparseable: int = 0
    thrown_away: int = 0
    lost_publish_races: int = 0
    per_second: deque[list[int]] = field(default_factory=deque)
    """[second, records processed in it], for the last :data:`RATE_HORIZON_S` seconds."""

    def count_processed(self, now: float, records: int) -> None:
        self.processed += records
        second = int(now)
        if self.per_second and self.per_second[-1][0] == second:
            self.per_second[-1][1] += records
        else:
            self.per_second.append([second, records])
        while self.per_second[0][0] <= now - RATE_HORIZON_S:
            self.per_second.popleft()

    def rate(self, now: float, window_s: float) -> float:
        """Processed records per second over the last ``window_s`` seconds (at most the horizon)."""
        counted = sum(n for second, n in self.per_second if now - second <= window_s)
        return counted / max(1.0, min(window_s, now - self.started))


class Supervisor:
    """A datasource's supervisor, driven by :meth:`run_once`.

    ``run_once`` and every change of its fields hold ``lock``; readers use :attr:`status`, the
    snapshot published at the end of each run.
    """

    def __init__(self, supervisor_id: str, spec: SupervisorSpec, suspended: bool, ctx: SupervisorContext) -> None:
        self.id = supervisor_id
        self.spec = spec
        self.suspended = suspended
        self.stopping = False
        self.ctx = ctx
        self.lock = threading.RLock()
        self.active: dict[str, ActiveTask] = {}
        self.groups: dict[int, GroupState] = {}
        self.counters = Counters(started=ctx.clock())
        self.discovered: dict[str, str] = {}
        """The dimensions of the rows published since the overlord started and their (widest) types, in order
        of discovery."""
        self.recent_errors = RecentErrors()
        self.recent_tasks: deque[FinishedTaskStatus] = deque(maxlen=20)
        self.series = Series()
        """Lag, records/s and task outcomes in fixed steps for an hour: the console's charts, ``.../series``."""
        self.watermarks: dict[Partition, tuple[int, int]] = {}
        self.arrivals: dict[Partition, deque[tuple[int, float]]] = {}
        """Per partition, (latest offset, clock time a refresh or a task's read first saw it): how long records wait."""
        self.stored: CommittedOffsets | None = None
        self.offsets_read: float | None = None
        """When :attr:`stored` was last read or set from a publish of this supervisor's (monotonic); None: read it."""
        self.recorded_ids: dict[Partition, str] | None = None
        """The topic IDs recorded for the committed partitions, as last read; None: read them."""
        self.offsets_updated: datetime | None = None
        self.refreshed: float | None = None
        """When the watermarks were last read (monotonic)."""
        self.lows_asked: float | None = None
        """When the earliest offsets were last asked for (monotonic); None: at the next look at the topic."""
        self.stopped_partitions: dict[Partition, str] = {}
        """Partitions whose committed offsets lie outside what the broker holds, and why: not read until reset."""
        self.re_created: set[Partition] = set()
        """Stopped partitions whose committed offset is a re-created topic's predecessor's: their lag counts from
        the earliest offset (:meth:`lag_from`)."""
        self.next_due: float | None = None
        """When a group held back by ``min_task_interval_s`` may launch (monotonic); None if none is."""
        self.failed_runs = 0
        self.runs = 0
        self.detailed_state = "PENDING"
        self.status = self.snapshot()

    # --- the run loop ----------------------------------------------------------------------

    def run_once(self) -> None:
        """One pass of the loop; failures are recorded, never raised (the next pass retries)."""
        step = STEP_COSTS.step
        with self.lock, step("supervisor.run"):
            try:
                with step("supervisor.task_status"):
                    self.update_task_status()
                with step("supervisor.read_offsets"):
                    self.read_committed_offsets()
                with step("supervisor.topic_check"):
                    worth_asking = self.topic_worth_asking()
                if worth_asking:
                    with step("supervisor.watermarks"):
                        self.refresh_partitions()
                    with step("supervisor.offsets_in_range"):
                        self.check_offsets_in_range()
                if self.launching:
                    with step("supervisor.pin_offsets"):
                        self.pin_initial_offsets()
                    with step("supervisor.plan"):
                        self.create_new_tasks()
                else:
                    self.detailed_state = "SUSPENDED" if self.suspended else "STOPPING"
                if self.failed_runs:
                    self.recent_errors.resolve(self.ctx.now(), run_only=True)
                self.failed_runs = 0
            except Exception as exc:  # broker or PostgreSQL unreachable, topic changed, and the like
                self.failed_runs += 1
                self.offsets_changed()  # read again: a reset may be what it waits for
                self.detailed_state = "UNABLE_TO_CONNECT"
                self.record_error(f"{type(exc).__name__}: {exc}", run=True)
                logger.warning("supervisor %s: run failed (%d in a row): %s", self.id, self.failed_runs, exc)
            finally:
                self.runs += 1
                with step("supervisor.status"):
                    self.publish_status()

    def topic_worth_asking(self) -> bool:
        """Whether this run reads the topic's watermarks: a task group may launch now, or they are old or new.

        A run woken by a task's end while its group is held back by ``min_task_interval_s`` would
        launch nothing: a broker round trip then only refreshes the status (a broker may pay a scan
        of the partition for each offset asked). They are asked at least every
        ``policy.watermarks_max_age_s`` for the status and new partitions, and every run while no
        partition is known or some is stopped.
        """
        now, policy = self.ctx.clock(), self.ctx.policy
        if (self.refreshed is None or now - self.refreshed >= policy.watermarks_max_age_s
                or self.lows_asked is None  # a task failed: its records may have been deleted before it read them
                or not self.latest or self._unsettled()):  # none known yet
            return True
        busy = self._busy_partitions()
        return self.launching and any(
            self._free(group, partitions, busy, now) and not self._to_the_end(group, partitions)
            and not self._held_back(group, next_range(self.committed, self.latest, partitions,
                                                      policy.max_records_per_task), now)
            for group, partitions in self._groups())

    def refresh_partitions(self) -> None:
        """Read every partition's latest offset from the broker, and the earliest when :meth:`lows_due`."""
        now = self.ctx.clock()
        known = None if self.lows_due(now) else {p: low for p, (low, _) in self.watermarks.items()}
        self.watermarks = dict(self.ctx.watermarks(consumer_properties(self.spec, self.ctx.settings),
                                                   self.spec.spec.io_config, known_lows=known))
        if known is None:
            self.lows_asked = now
        self.offsets_updated = self.ctx.now()
        self.refreshed = now
        for gone in self.arrivals.keys() - self.watermarks.keys():  # a topic deleted, or no longer matched
            del self.arrivals[gone]
        for p, (_, high) in self.watermarks.items():
            self._saw(p, high, now)

    def lows_due(self, now: float) -> bool:
        """Whether a look at the topic asks for every partition's earliest offset.

        It does when they are ``policy.earliest_max_age_s`` old, a task failed since (a read of records
        deleted before it started fails), partitions are to be pinned, or stopped (a reset may free
        them). A partition whose earliest is not known yet is asked for anyway.
        """
        return (self.lows_asked is None or now - self.lows_asked >= self.ctx.policy.earliest_max_age_s
                or self._unsettled())

    def _unsettled(self) -> bool:
        """Whether some partition is stopped (a reset may free it) or has no committed offset yet (to pin)."""
        return bool(self.stopped_partitions) or not self.latest.keys() <= self.committed.keys()

    def _saw(self, partition: Partition, high: int, now: float) -> None:
        """Note that ``partition`` holds records up to ``high`` (its arrival times: :meth:`lag_seconds`)."""
        seen = self.arrivals.setdefault(partition, deque(maxlen=100_000))
        if not seen or high > seen[-1][0]:
            seen.append((high, now))

    def _grown(self, highs: Mapping[Partition, int]) -> None:
        """Latest offsets a task's read saw, past those asked for: the status's lag without a round trip."""
        now = self.ctx.clock()
        for p, high in highs.items():
            if p in self.watermarks and high > self.watermarks[p][1]:
                self.watermarks[p] = (self.watermarks[p][0], high)
                self._saw(p, high, now)

    def lag_from(self) -> Offsets:
        """Where each partition's lag counts from: its committed offset, or its earliest if its topic was re-created.

        A re-created topic's records all wait (the committed offset is the old topic's, no place in the new one):
        8 records after 5 committed are a lag of 8, not 3.
        """
        committed = self.committed
        return Offsets({p: self.watermarks[p][0] if p in self.re_created and p in self.watermarks else o
                        for p, o in committed.items()})

    def lag_seconds(self, start: Offsets, now: float) -> dict[Partition, float]:
        """How long the oldest unpublished record of each partition has waited, since a refresh or a task saw it.

        ``start``: where each partition's lag counts from (:meth:`lag_from`).
        """
        waited = {}
        for p, seen in self.arrivals.items():
            while seen and p in start and seen[0][0] <= start[p]:
                seen.popleft()  # everything up to that latest offset is published
            waited[p] = round(now - seen[0][1], 3) if seen and p in start else 0.0
        return waited

    def update_task_status(self) -> None:
        """Book finished tasks; stop those past ``completionTimeout``; report one that waited as long for a slot.

        ``completionTimeout`` counts from the start: a task waiting for a slot is not stopped (its
        range would wait again), but the wait is reported, since lag grows meanwhile.
        """
        timeout, now = self.spec.spec.io_config.completion_timeout.total_seconds(), self.ctx.clock()
        for task_id, task in list(self.active.items()):
            if task.future.done():
                del self.active[task_id]
                with STEP_COSTS.step("finish.bookkeeping"):
                    self._handle_finished(task)
            elif task.started is not None and now - task.started > timeout:
                self.ctx.runner.stop(task_id)
                self.record_error(f"task {task_id} exceeded completionTimeout ({timeout:.0f}s); stopped",
                                  "completionTimeout")
            elif task.started is None and now - task.launched > timeout and not task.said_waiting:
                task.said_waiting = True
                self.record_error(f"task {task_id} has been waiting for a task slot for {now - task.launched:.0f} s, "
                                  "longer than completionTimeout: every slot is busy (OVERLORD_TASK_SLOTS); lag grows "
                                  "meanwhile", "waiting for a task slot")

    def read_committed_offsets(self) -> None:
        """Read the committed offsets unless known; refuse offsets of another topic (a reset is needed).

        A publish of this supervisor's tells them (its outcome is the row as committed). They are read
        again after a failed task or run, a reset, ``policy.watermarks_max_age_s`` after the last read or
        publish (another writer: ``overlord index`` by hand), and every run while a partition is stopped
        (a reset is what it waits for). Offsets another writer moved fail the next task's publish, which
        makes the next run read them.
        """
        now = self.ctx.clock()
        if (self.offsets_read is None or now - self.offsets_read >= self.ctx.policy.watermarks_max_age_s
                or self.stopped_partitions):
            before, self.stored = self.stored, committed_offsets(self.ctx.engine, self.spec.datasource)
            self.offsets_read = now
            if before is not None and (self.stored is None or self.stored.epoch != before.epoch):
                self.recorded_ids = None  # reset by another process: it may have forgotten topic IDs
        committed_for(self.spec, self.stored)

    def offsets_changed(self) -> None:
        """Another writer moved the committed offsets (a reset): read them and the recorded topic IDs again."""
        self.offsets_read = None
        self.recorded_ids = None

    def _published(self, row: CommittedOffsets | None) -> None:
        """A task of this supervisor's committed ``row``: the offsets to plan from, unless a newer one is known."""
        if row is not None and (self.stored is None or (row.epoch, row.version) > (self.stored.epoch,
                                                                                  self.stored.version)):
            self.stored = row
            if self.offsets_read is not None:
                self.offsets_read = self.ctx.clock()  # as fresh as a read

    def check_offsets_in_range(self) -> None:
        """Committed offsets must belong to the topic as it is and lie within what it has; else the partition stops.

        A topic re-created since its offsets were committed (a new topic ID), past the latest
        offset (topic re-created, unclean leader election), or before the earliest
        (records deleted by retention before they were read) without ``resetOffsetAutomatically``:
        the partition is not read again until its offsets are reset (:attr:`stopped_partitions`
        names it and why; the other partitions go on). With ``resetOffsetAutomatically``, records
        deleted before they were read are skipped by a reset to the earliest offsets that records
        exactly which records were skipped.
        """
        committed, lost = self.committed, {}
        stopped = self.re_created_partitions()
        self.re_created = set(stopped)
        for p, (low, high) in self.watermarks.items():
            if p not in committed or p in stopped:
                continue
            if committed[p] > high:
                stopped[p] = (f"partition {p}: committed offset {committed[p]} is past the latest offset {high} "
                              "(topic recreated or records lost on the broker?); reset its offsets to go on")
            elif committed[p] < low:
                lost[p] = (committed[p], low)
        if lost and self.spec.spec.tuning_config.reset_offset_automatically:
            self._skip_lost(lost)
        else:
            stopped.update({p: f"partition {p}: records [{start}, {low}) were deleted before they were indexed; "
                               "reset its offsets, or set resetOffsetAutomatically to skip them"
                            for p, (start, low) in lost.items()})
        for p, reason in stopped.items():
            if self.stopped_partitions.get(p) != reason:
                self.record_error(reason)
                logger.warning("supervisor %s: %s", self.id, reason)
        self.stopped_partitions = stopped

    def re_created_partitions(self) -> dict[Partition, str]:
        """Committed partitions whose topic has another ID than when their offsets were pinned, and why."""
        committed, marks = self.committed, self.watermarks
        changed = self._check_topic_ids([p for p in marks if p in committed])
        return {p: (f"partition {p}: topic {kafka_partition(p, self.spec.spec.io_config.topic)[0]!r} was re-created "
                    f"(topic ID {old} is now {new}); its committed offset {committed[p]} is the old topic's, and the "
                    f"new one holds records [{marks[p][0]}, {marks[p][1]}); reset its offsets to go on")
                for p, (old, new) in changed.items()}

    def _check_topic_ids(self, partitions: list[Partition]) -> dict[Partition, tuple[str, str]]:
        """``{partition: (recorded, now)}`` for those whose topic ID changed; IDs seen first are recorded.

        The broker is asked every time; the recorded IDs are read again only when one is new to this
        supervisor (first sight, or recorded by a publish) or after a reset.
        """
        properties = consumer_properties(self.spec, self.ctx.settings)
        current = partition_topic_ids(properties, self.spec.spec.io_config.topic, partitions, self.ctx.topic_ids)
        recorded = self.recorded_ids
        if recorded is None or not current.keys() <= recorded.keys():
            changed = check_topic_ids(self.ctx.engine, self.spec.datasource, current)
            self.recorded_ids = {**(recorded or {}), **current, **{p: old for p, (old, _) in changed.items()}}
            return changed
        return {p: (recorded[p], now) for p, now in current.items() if recorded[p] != now}

    def _skip_lost(self, lost: dict[Partition, tuple[int, int]]) -> None:
        """``resetOffsetAutomatically``: move past records deleted before they were read, on the record."""
        gaps = "; ".join(f"partition {p}: records [{start}, {low}) were deleted before they were indexed"
                         for p, (start, low) in lost.items())
        moved = skip_offsets(self.ctx.engine, self.spec.datasource, lost, self.ctx.leader_epoch)
        if moved is None:  # a publish or a new leader moved the offsets since they were read: look again next run
            return
        self.stored = moved
        skipped = "resetOffsetAutomatically: " + "; ".join(
            f"skipped records [{start}, {low}) of partition {p}" for p, (start, low) in lost.items())
        self.ctx.store.record_reset(self.id, self.spec.datasource, {p: start for p, (start, _) in lost.items()},
                                    {p: low for p, (_, low) in lost.items()}, skipped)
        self.record_error(skipped)
        logger.warning("supervisor %s: %s; offsets reset to the earliest (resetOffsetAutomatically)", self.id, gaps)

    def pin_initial_offsets(self) -> None:
        """Commit where partitions seen for the first time start, before their first task, and their topic IDs."""
        before = self.committed
        self.stored = pin_initial_offsets(self.ctx.engine, self.spec, self.watermarks, self.stored)
        new = {p: o for p, o in self.committed.items() if p not in before}
        if new:
            self._check_topic_ids(list(new))
            logger.info("supervisor %s: new partitions %s start at offsets %s (committed)", self.id, sorted(new), new)

    def create_new_tasks(self) -> None:
        """Launch a task for every free group with records to read, unless it trickles and launched lately.

        A group launches at most once per ``policy.min_task_interval_s`` unless its next task is
        full (``max_records_per_task``): a slow topic is indexed in fewer, larger tasks. A group
        held back sets :attr:`next_due`.
        """
        policy, now = self.ctx.policy, self.ctx.clock()
        busy = self._busy_partitions()
        self.next_due = None
        for group, partitions in self._groups():
            if not self._free(group, partitions, busy, now):
                continue
            todo = next_range(self.committed, self.latest, partitions, policy.max_records_per_task)
            if self._held_back(group, todo, now):  # due then, records seen or not: it looks at the topic then
                due = self._due(group)
                self.next_due = due if self.next_due is None else min(due, self.next_due)
                continue
            to_the_end = self._to_the_end(group, partitions)
            if to_the_end:
                cap = self._to_the_end_cap()
                todo = OffsetRange(todo.start, next_range(todo.start, {p: o + cap for p, o in todo.start.items()},
                                                          partitions, cap).end)
            elif todo.empty:
                continue
            self.groups[group].due = now + self._interval()
            with STEP_COSTS.step("launch.submit"):
                self._launch(group, todo, to_the_end)
        self.detailed_state = "RUNNING" if self.active else "IDLE"

    def _groups(self) -> Iterator[tuple[int, list[Partition]]]:
        """Each task group and the partitions it reads (those stopped left out)."""
        count = self.spec.spec.io_config.task_count
        for group in range(count):
            yield group, [p for p in self.latest if task_group(p, count) == group and p not in self.stopped_partitions]

    def _busy_partitions(self) -> set[Partition]:
        return {p for task in self.active.values() for p in task.request.start_offsets}

    def _free(self, group: int, partitions: list[Partition], busy: set[Partition], now: float) -> bool:
        """A group with partitions, no task in flight and no retry backoff to wait out."""
        state = self.groups.setdefault(group, GroupState())
        return bool(partitions) and not busy.intersection(partitions) and now >= state.retry_after

    def _to_the_end(self, group: int, partitions: list[Partition]) -> bool:
        """Whether the group's next task reads to the end of its partitions (:attr:`GroupState.flowing`).

        Not with replicas (they must read the same range), and only where every partition's topic ID is
        recorded: the publish then refuses a re-created topic's records (without IDs, only a look at
        the broker, which sees its offsets go back, finds it).
        """
        recorded = self.recorded_ids or {}
        return (self.groups[group].flowing and self.spec.spec.io_config.replicas == 1
                and all(p in recorded for p in partitions))

    def _to_the_end_cap(self) -> int:
        """The most a task read to the end reads: a task that read as many found a backlog."""
        return min(self.ctx.policy.max_records_per_task, TO_THE_END_MAX_RECORDS)

    def _held_back(self, group: int, todo: OffsetRange, now: float) -> bool:
        """A group launched lately waits until it is due, unless its next task is full or holds the target."""
        policy = self.ctx.policy
        enough = policy.target_records if policy.target_records > 0 else policy.max_records_per_task
        return now < self._due(group) and todo.size() < min(enough, policy.max_records_per_task)

    def _due(self, group: int) -> float:
        """When a group may launch again however few records wait (its run then looks at the topic)."""
        return self.groups[group].due

    def _interval(self) -> float:
        """The time from a group's launch to its next: ``min_task_interval_s``, or less for a busy topic.

        Less when its records arrive fast enough to hold ``target_records`` sooner (the last minute's
        rate, spread over the groups).
        """
        policy = self.ctx.policy
        interval = policy.min_task_interval_s
        if policy.target_records > 0 and interval > 0:
            rate = self.counters.rate(self.ctx.clock(), 60) / self.spec.spec.io_config.task_count
            if rate > 0:
                interval = min(interval, policy.target_records / rate)
        return interval

    def publish_status(self) -> None:
        """Replace :attr:`status` with a snapshot of now, and remember its lag and rate (callers hold ``lock``)."""
        self.status = self.snapshot()
        self.series.observe(self.status.generated_at.timestamp(), sum(self.status.lag.values()),
                            self.status.counters.processed_per_second["1m"])

    # --- helpers ---------------------------------------------------------------------------

    @property
    def latest(self) -> Offsets:
        return Offsets({p: high for p, (_, high) in self.watermarks.items()})

    @property
    def committed(self) -> Offsets:
        return self.stored.offsets if self.stored is not None else Offsets()

    @property
    def launching(self) -> bool:
        return not (self.suspended or self.stopping)

    def _launch(self, group: int, todo: OffsetRange, to_the_end: bool = False) -> None:
        base = f"index_kafka_{self.spec.datasource}_{group}_{uuid.uuid4().hex[:8]}"
        min_time, max_time = self.spec.spec.io_config.message_time_bounds(self.ctx.now())
        for replica in range(self.spec.spec.io_config.replicas):
            request = IndexTaskRequest(
                task_id=f"{base}_r{replica}", spec=self.spec, start_offsets=todo.start, end_offsets=todo.end,
                initial_offsets=Offsets(), deep_storage=self.ctx.settings.deep_storage,
                segment_cache=self.ctx.settings.publishers_segment_cache,
                generation=self.stored.version if self.stored is not None else 0,
                epoch=self.stored.epoch if self.stored is not None else 0, leader_epoch=self.ctx.leader_epoch,
                bootstrap_servers=self.ctx.settings.kafka_bootstrap_servers, min_time=min_time, max_time=max_time,
                read_to_end=to_the_end)
            with STEP_COSTS.step("launch.task_row"):
                self.ctx.store.insert_task(request.task_id, self.id, self.spec.datasource, todo.start, todo.end)
            task = ActiveTask(request, Future(), group, self.ctx.clock(), self.ctx.now())
            self.active[request.task_id] = task
            task.future = self.ctx.runner.submit(request, lambda _task_id: self.ctx.wake(self.id),
                                                 partial(self._mark_started, task), partial(self._extended, task))
            logger.info("supervisor %s: launched task %s: %s", self.id, request.task_id, todo,
                        extra={"task_id": request.task_id})

    def _mark_started(self, task: ActiveTask, _task_id: str) -> None:
        task.started = self.ctx.clock()  # completionTimeout counts from here, not from the queue

    def _extended(self, task: ActiveTask, request: IndexTaskRequest) -> IndexTaskRequest:
        """``request`` as it starts: read up to the latest offsets now if it waited :data:`EXTEND_AFTER_S` for a slot.

        Its end was the latest offset at launch; records that came while it waited would wait for the
        next task, a whole interval more (a busy control plane's queue then added to freshness twice).
        Called in the task's thread. Not with replicas (they must read the same range), never shorter
        than planned, within ``max_records_per_task``; the range planned stands if the broker does not
        answer. The publish checks the start as ever, and commits the end read.
        """
        if (request.read_to_end or self.spec.spec.io_config.replicas > 1
                or self.ctx.clock() - task.launched < EXTEND_AFTER_S):
            return request
        try:
            marks = self.ctx.watermarks(consumer_properties(self.spec, self.ctx.settings), self.spec.spec.io_config,
                                        known_lows=dict.fromkeys(request.start_offsets, 0))
        except Exception as exc:
            logger.info("supervisor %s: task %s reads the range planned at launch (%s)", self.id, request.task_id, exc)
            return request
        planned = request.end_offsets
        latest = {p: max(planned[p], marks[p][1]) if p in marks else planned[p] for p in request.start_offsets}
        todo = next_range(request.start_offsets, latest, list(request.start_offsets),
                          self.ctx.policy.max_records_per_task)
        end = Offsets({p: max(o, planned[p]) for p, o in todo.end.items()})
        return request if end == planned else replace(request, end_offsets=end)

    def _handle_finished(self, task: ActiveTask) -> None:
        task_id, state = task.request.task_id, self.groups.setdefault(task.group, GroupState())
        error = (CancelledError("never started: the overlord shut down first") if task.future.cancelled()
                 else task.future.exception())
        report = None if error is not None else task.future.result()
        outcome = report.outcome.status if report is not None else None
        if report is not None:
            self._grown(report.high_watermarks)
        if report is not None and outcome == "ok":
            status, detail = "SUCCESS", "published"
            self._published(report.outcome.row)
            state.failures, state.flowing = 0, 0 < report.records < self._to_the_end_cap()
            self.recent_errors.resolve(self.ctx.now())  # ingestion works again
            self.counters.count_processed(self.ctx.clock(), report.processed)
            self.counters.unparseable += report.unparseable
            self.counters.thrown_away += report.thrown_away
            self.discovered = widest_types([self.discovered, report.dimensions])
        elif outcome == "already_published":
            status, detail = "SUCCESS", "another replica published this range first"
            self.counters.lost_publish_races += 1
        else:
            status = "FAILED"
            detail = (f"publish {outcome}: {report.outcome.message}" if report is not None
                      else error_summary(error) if error is not None else "failed")
            state.failures, state.flowing = state.failures + 1, False
            self.lows_asked = None
            self.offsets_changed()  # what refused it (a reset, another writer, a re-created topic) is read again
            delay = self.ctx.policy.backoff_s(state.failures)
            state.retry_after = self.ctx.clock() + delay
            self.record_error(f"task {task_id}: {detail} (retrying in {delay:.0f}s)", f"task failed: {detail}")
        log = logger.info if status == "SUCCESS" else logger.warning
        log("supervisor %s: task %s %s: %s", self.id, task_id, status, detail, extra={"task_id": task_id})
        with STEP_COSTS.step("finish.task_row"):
            self.ctx.store.finish_task(task_id, status, detail, _report_json(report),
                                       self.ctx.runner.logs.take(task_id),
                                       end_offsets=report.end_offsets if report is not None else None)
        duration = round(self.ctx.clock() - task.launched, 3)
        end = Offsets(report.end_offsets) if report is not None else task.request.end_offsets  # as read
        self.recent_tasks.appendleft(FinishedTaskStatus(
            task_id, status, detail, task.request.start_offsets, end, task.launched_at, duration))
        self.series.task(self.ctx.now().timestamp(), status == "SUCCESS", duration)
        if self.ctx.metrics is not None:
            with STEP_COSTS.step("finish.metrics"):
                self.ctx.metrics.task_finished(self.spec.datasource, report, duration)

    def record_error(self, message: str, key: str | None = None, *, run: bool = False) -> None:
        """Note an error for the status (``key``: what makes two the same error; see :class:`RecentErrors`)."""
        self.recent_errors.record(self.ctx.now(), message, key, run=run)

    # --- what is shown ---------------------------------------------------------------------

    @property
    def state(self) -> str:
        unhealthy_after = self.ctx.policy.unhealthy_after
        if self.stopping:
            return "STOPPING"
        if self.suspended:
            return "SUSPENDED"
        if self.failed_runs >= unhealthy_after or self.stopped_partitions:
            return "UNHEALTHY_SUPERVISOR"
        if any(g.failures >= unhealthy_after for g in self.groups.values()):
            return "UNHEALTHY_TASKS"
        return "PENDING" if self.offsets_updated is None else "RUNNING"

    @property
    def idle(self) -> bool:
        """No task in flight and free to launch one: worth checking the topic again soon."""
        return not self.active and self.launching

    def next_run_in_s(self) -> float | None:
        """Seconds until the next run unless a finishing task wakes it first.

        When a group held back is due, or the idle poll; None when only a task's end (or ``period``) matters.
        """
        waits = [self.next_due - self.ctx.clock()] if self.next_due is not None and self.launching else []
        if self.idle and not waits:  # a group due looks at the topic then
            waits.append(self.ctx.policy.idle_poll_s)
        return max(0.0, min(waits)) if waits else None

    def snapshot(self) -> SupervisorStatus:
        """The current status as an immutable value (callers hold ``lock``)."""
        latest, committed, start = self.latest, self.committed, self.lag_from()
        lag = Offsets({p: max(0, o - start.get(p, o)) for p, o in latest.items()})
        now, c = self.ctx.clock(), self.counters
        state = self.state
        return SupervisorStatus(
            id=self.id, spec=self.spec, state=state, detailed_state=self.detailed_state,
            suspended=self.suspended, healthy=state not in ("UNHEALTHY_SUPERVISOR", "UNHEALTHY_TASKS"),
            latest=latest, committed=committed, lag=lag, lag_seconds=self.lag_seconds(start, now),
            offsets_updated=self.offsets_updated,
            active_tasks=tuple(ActiveTaskStatus(task_id, t.request.start_offsets, t.request.end_offsets,
                                                t.launched_at) for task_id, t in self.active.items()),
            recent_tasks=tuple(self.recent_tasks), recent_errors=self.recent_errors.snapshot(),
            counters=CounterStatus(c.processed, c.unparseable, c.thrown_away, c.lost_publish_races,
                                   {"1m": round(c.rate(now, 60), 1), "5m": round(c.rate(now, 300), 1),
                                    "15m": round(c.rate(now, 900), 1)}),
            generated_at=self.ctx.now(), dimensions=dict(self.discovered),
            stopped_partitions=dict(self.stopped_partitions),
            earliest=Offsets({p: low for p, (low, _) in self.watermarks.items()}))


def _report_json(report: TaskReport | None) -> dict[str, Any] | None:
    if report is None:
        return None
    return {"records": report.records, "processed": report.processed, "unparseable": report.unparseable,
            "thrownAway": report.thrown_away, "rowsOut": report.rows_out, "segments": len(report.segments),
            "publish": report.outcome.status, "publishMessage": report.outcome.message,
            "indexSeconds": round(report.index_seconds, 3), "publishSeconds": round(report.publish_seconds, 3),
            "badSamples": list(report.bad_samples)}
