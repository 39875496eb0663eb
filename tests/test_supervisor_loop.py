"""The supervisor's run loop, one ``run_once`` at a time, with a fake clock, fake watermarks and a
fake task runner (tasks are futures the test completes), against the real metadata store.

The end-to-end behaviour on the real broker and Spark is in test_supervisor.py; here every
step's decision is checked deterministically.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

import pytest
import sqlalchemy as sa

from indexing_task.task import IndexTaskRequest, TaskReport
from indexing_task.task_errors import RangeNotReadableError
from indexing_task.watermarks import stream_topic_ids
from overlord.dev.stack import DevStack
from overlord.supervisor.loop import GroupState, Supervisor, SupervisorContext
from overlord.supervisor.metadata_store import MetadataStore
from overlord.supervisor.policy import SupervisorPolicy
from overlord.supervisor.task_logs import TaskLogs
from overlord.supervisor.task_ranges import TopicChanged, next_task_request
from segment_store import Offsets, PublishOutcome, TopicPartitionId, committed_offsets, publish, reset_offsets
from segment_store.publish import PublishRequest, Status
from specs import KafkaIOConfigSpec, load_supervisor_spec
from tests.helpers import spec_json


class FakeRunner:
    """Tasks are futures the test resolves; ``stopped`` lists what the loop asked to stop.

    A task starts at once unless ``slots_free`` is False; then it waits until ``start_queued``.
    """

    def __init__(self) -> None:
        self.tasks: dict[str, tuple[IndexTaskRequest, Future[TaskReport]]] = {}
        self.stopped: list[str] = []
        self.slots_free = True
        self.queued: list[tuple[str, Any]] = []
        self.logs = TaskLogs()  # the real one: the loop hands each finished task's lines to the store
        self.extend: dict[str, Any] = {}
        """Each task's ``extend``: what the real runner calls as the task starts."""

    def submit(self, request: IndexTaskRequest, on_done: Any, on_start: Any, extend: Any = None) -> Future[TaskReport]:
        future: Future[TaskReport] = Future()
        self.tasks[request.task_id] = (request, future)
        self.extend[request.task_id] = extend
        if self.slots_free:
            on_start(request.task_id)
        else:
            self.queued.append((request.task_id, on_start))
        return future

    def start_queued(self) -> None:
        for task_id, on_start in self.queued:
            on_start(task_id)
        self.queued.clear()

    def stop(self, task_id: str) -> bool:
        self.stopped.append(task_id)
        return True

    def running(self) -> list[IndexTaskRequest]:
        return [request for request, future in self.tasks.values() if not future.done()]


class World:
    """The clock and the broker's watermarks, as the test sets them."""

    def __init__(self) -> None:
        self.time = 1000.0
        self.marks: dict[Any, tuple[int, int]] = {}
        self.broker_down = False
        self.ids: dict[str, str] = {}
        self.earliest_asked: list[set[Any]] = []
        """Per look at the topic, the partitions whose earliest offset it asked for."""

    def clock(self) -> float:
        return self.time

    def watermarks(self, _properties: Mapping[str, Any], io: KafkaIOConfigSpec, *,
                   known_lows: Mapping[Any, int] | None = None) -> dict[Any, tuple[int, int]]:
        """The marks set, those of a pattern's topics only if the spec reads them; lows given are not asked."""
        if self.broker_down:
            raise ConnectionError("broker unreachable")
        marks = {p: m for p, m in self.marks.items() if not isinstance(p, TopicPartitionId) or io.reads(p.topic)}
        known = known_lows or {}
        self.earliest_asked.append({p for p in marks if p not in known})
        return {p: (known.get(p, low), high) for p, (low, high) in marks.items()}

    def topic_ids(self, _properties: Mapping[str, Any], topics: Iterable[str]) -> dict[str, str]:
        """The topic IDs set: none unless a test sets them (a broker without topic IDs)."""
        return {t: self.ids[t] for t in topics if t in self.ids}


POLICY = SupervisorPolicy(unhealthy_after=2, backoff_base_s=10.0, backoff_cap_s=25.0)


@pytest.fixture()
def world() -> World:
    return World()


@pytest.fixture()
def runner() -> FakeRunner:
    return FakeRunner()


def make_supervisor(stack: DevStack, engine: sa.Engine, world: World, runner: FakeRunner, datasource: str,
                    *, suspended: bool = False, topic: str | None = "topic-a", **io: Any) -> Supervisor:
    store = MetadataStore(engine)
    ctx = SupervisorContext(engine, store, runner, stack.settings("/unused"), lambda _id: None,  # type: ignore[arg-type]
                            POLICY, clock=world.clock, watermarks=world.watermarks, topic_ids=world.topic_ids)
    return Supervisor(datasource, load_supervisor_spec(spec_json(datasource, topic, **io)), suspended, ctx)


def finish(runner: FakeRunner, request: IndexTaskRequest, status: Status = "ok", *, really_publish: bool = False,
           engine: sa.Engine | None = None, highs: Mapping[Any, int] | None = None,
           topic_ids: Mapping[Any, str] | None = None, ends: Mapping[Any, int] | None = None) -> None:
    """Resolve a fake task; with ``really_publish`` its range goes through the real publish transaction.

    ``topic_ids``: the partitions' topic IDs as the broker gives them after the read (a real task's check);
    ``ends``: where a task read to the end stopped.
    """
    if ends is not None:
        assert request.read_to_end
        request = replace(request, end_offsets=Offsets(ends))
    if really_publish:
        assert engine is not None
        outcome = publish(engine, PublishRequest(request.spec.datasource, request.spec.spec.io_config.stream,
                                                 request.task_id, request.start_offsets, request.end_offsets,
                                                 epoch=request.epoch, topic_ids=topic_ids or {}))
    else:
        outcome = PublishOutcome(status, f"fake {status}", Offsets())
    records = sum(request.end_offsets[p] - request.start_offsets[p] for p in request.start_offsets)
    runner.tasks[request.task_id][1].set_result(TaskReport(
        request.task_id, request.spec.datasource, request.start_offsets, request.end_offsets, records, 1, 0, 0,
        (), (), outcome, 0.1, 0.01, high_watermarks=highs or {}))


def fail_read(runner: FakeRunner, request: IndexTaskRequest) -> None:
    """Fail a fake task as a read of records deleted before it started fails."""
    start = min(request.start_offsets.values())
    runner.tasks[request.task_id][1].set_exception(
        RangeNotReadableError(f"topic-a at offset {start}: Broker: Offset out of range"))


def test_first_run_pins_earliest_offsets_and_launches_one_task_per_group(stack, engine, world, runner, datasource):
    world.marks = {0: (5, 20), 1: (0, 0), 2: (3, 9)}
    sup = make_supervisor(stack, engine, world, runner, datasource, taskCount=2, useEarliestOffset=True)
    sup.run_once()
    stored = committed_offsets(engine, datasource)
    assert stored is not None and dict(stored.offsets) == {0: 5, 1: 0, 2: 3}  # pinned before any task
    launched = {tuple(r.start_offsets): (dict(r.start_offsets), dict(r.end_offsets)) for r in runner.running()}
    assert launched == {(0, 2): ({0: 5, 2: 3}, {0: 20, 2: 9})}  # group 1 (partition 1) has nothing to read
    assert sup.status.detailed_state == "RUNNING" and sup.status.lag == {0: 15, 1: 0, 2: 6}

    world.marks[1] = (0, 4)
    sup.run_once()  # group 0 is busy; group 1 now has records
    assert sorted(dict(r.start_offsets) == {1: 0} for r in runner.running()) == [False, True]


def test_latest_offset_start_and_no_task_while_suspended(stack, engine, world, runner, datasource):
    world.marks = {0: (0, 50)}
    sup = make_supervisor(stack, engine, world, runner, datasource, suspended=True, useEarliestOffset=False)
    sup.run_once()
    assert runner.tasks == {} and committed_offsets(engine, datasource) is None  # nothing pinned while suspended
    assert sup.status.state == "SUSPENDED"
    sup.suspended = False
    sup.run_once()
    stored = committed_offsets(engine, datasource)
    assert stored is not None and dict(stored.offsets) == {0: 50} and runner.tasks == {}  # latest: nothing to do


def test_a_published_task_frees_its_group_and_the_next_range_starts_at_its_end(
        stack, engine, world, runner, datasource):
    world.marks = {0: (0, 10)}
    sup = make_supervisor(stack, engine, world, runner, datasource, useEarliestOffset=True)
    sup.run_once()
    (first,) = runner.running()
    world.marks = {0: (0, 25)}
    finish(runner, first, really_publish=True, engine=engine)
    sup.run_once()
    (second,) = runner.running()
    assert (dict(second.start_offsets), dict(second.end_offsets)) == ({0: 10}, {0: 25})
    assert [(t.id, t.status, t.detail) for t in sup.status.recent_tasks] == [(first.task_id, "SUCCESS", "published")]
    assert sup.status.counters.processed == 10


def test_a_trickle_waits_for_the_groups_interval_and_a_full_task_does_not(stack, engine, world, runner, datasource):
    world.marks = {0: (0, 10)}
    sup = make_supervisor(stack, engine, world, runner, datasource, useEarliestOffset=True)
    sup.ctx = replace(sup.ctx, policy=replace(POLICY, min_task_interval_s=5.0, max_records_per_task=100,
                                              idle_poll_s=10.0))
    sup.run_once()
    (first,) = runner.running()  # the group's first task starts at once
    world.marks = {0: (0, 25)}
    finish(runner, first, really_publish=True, engine=engine)
    world.time += 1
    sup.run_once()
    assert runner.running() == [] and sup.next_run_in_s() == pytest.approx(4.0)  # held back, due in 4 s
    world.time += 4
    sup.run_once()
    (second,) = runner.running()
    assert (dict(second.start_offsets), dict(second.end_offsets)) == ({0: 10}, {0: 25})
    world.marks = {0: (0, 500)}  # a backlog, seen at the next due launch: it is worked off in full tasks
    finish(runner, second, really_publish=True, engine=engine)
    world.time += 5
    sup.run_once()
    (third,) = runner.running()
    assert (dict(third.start_offsets), dict(third.end_offsets)) == ({0: 25}, {0: 125})
    finish(runner, third, really_publish=True, engine=engine)
    world.time += 0.5
    sup.run_once()
    (fourth,) = runner.running()  # full: it starts as soon as the group is free
    assert (dict(fourth.start_offsets), dict(fourth.end_offsets)) == ({0: 125}, {0: 225})
    assert sup.next_run_in_s() is None  # its end wakes the supervisor


def test_a_run_that_can_launch_nothing_leaves_the_broker_alone(stack, engine, world, runner, datasource):
    asked = Counter[str]()
    watermarks, topic_ids = world.watermarks, world.topic_ids

    def counted_watermarks(properties: Mapping[str, Any], io: KafkaIOConfigSpec, *,
                           known_lows: Mapping[Any, int] | None = None) -> dict[Any, tuple[int, int]]:
        asked["watermarks"] += 1
        return watermarks(properties, io, known_lows=known_lows)

    def counted_topic_ids(properties: Mapping[str, Any], topics: Iterable[str]) -> dict[str, str]:
        asked["topic_ids"] += 1
        return topic_ids(properties, topics)

    world.marks = {0: (0, 10)}
    sup = make_supervisor(stack, engine, world, runner, datasource, useEarliestOffset=True)
    sup.ctx = replace(sup.ctx, policy=replace(POLICY, min_task_interval_s=1.5, watermarks_max_age_s=5.0),
                      watermarks=counted_watermarks, topic_ids=counted_topic_ids)
    sup.run_once()
    (first,) = runner.running()
    world.marks = {0: (0, 20)}
    finish(runner, first, really_publish=True, engine=engine, highs={0: 16})  # as far as its read saw
    world.time += 0.7
    asked.clear()
    sup.run_once()  # woken by the task's end: the group is held back until 1.5 s after its launch
    assert asked == {} and runner.running() == [] and sup.status.committed == {0: 10}
    assert sup.status.lag == {0: 6}  # the lag the task saw, not 0
    assert sup.status.recent_tasks[0].status == "SUCCESS" and sup.next_run_in_s() == pytest.approx(0.8)
    world.time += 0.8
    sup.run_once()  # due: one look at the topic, and the next task
    (second,) = runner.running()
    assert asked["watermarks"] == 1 and dict(second.end_offsets) == {0: 20}
    world.marks = {0: (0, 30)}
    for _ in range(2):  # every group busy: the status's watermarks may grow 5 s old, no older
        world.time += 2.5
        asked.clear()
        sup.run_once()
    assert asked["watermarks"] == 1 and sup.status.lag == {0: 20}


def test_a_flowing_topic_s_next_task_reads_to_the_end_without_a_look_and_one_that_finds_nothing_looks(
        stack, engine, world, runner, datasource):
    looks = Counter[str]()
    watermarks = world.watermarks

    def counted(properties: Mapping[str, Any], io: KafkaIOConfigSpec, *,
                known_lows: Mapping[Any, int] | None = None) -> dict[Any, tuple[int, int]]:
        looks["watermarks"] += 1
        return watermarks(properties, io, known_lows=known_lows)

    world.marks, world.ids = {0: (0, 10), 1: (0, 4)}, {"topic-a": "id-a"}
    sup = make_supervisor(stack, engine, world, runner, datasource, useEarliestOffset=True)
    sup.ctx = replace(sup.ctx, watermarks=counted, policy=replace(POLICY, min_task_interval_s=1.5,
                                                                  max_records_per_task=100))
    sup.run_once()
    (first,) = runner.running()
    assert not first.read_to_end and dict(first.end_offsets) == {0: 10, 1: 4}
    finish(runner, first, really_publish=True, engine=engine, topic_ids={0: "id-a", 1: "id-a"})
    world.time += 1.5
    looks.clear()
    sup.run_once()  # due; its last task published records: the next reads to the end, planned without a look
    (second,) = runner.running()
    assert looks == {} and second.read_to_end
    assert (dict(second.start_offsets), dict(second.end_offsets)) == ({0: 10, 1: 4}, {0: 60, 1: 54})  # at most 100
    finish(runner, second, really_publish=True, engine=engine, ends={0: 10, 1: 4})  # nothing had come
    world.time += 1.5
    sup.run_once()
    assert looks["watermarks"] == 1 and runner.running() == []  # a look: the topic is quiet
    assert sup.status.committed == {0: 10, 1: 4}

    world.marks = {0: (0, 110), 1: (0, 104)}
    world.time += 1.5
    sup.run_once()
    (planned,) = runner.running()  # after a look: planned, capped
    finish(runner, planned, really_publish=True, engine=engine)  # 100 records: the cap, a backlog behind it
    world.time += 1.5
    looks.clear()
    sup.run_once()
    assert looks["watermarks"] == 1 and not runner.running()[0].read_to_end  # a backlog is planned after a look

    with_replicas = make_supervisor(stack, engine, world, runner, f"{datasource}_r", useEarliestOffset=True,
                                    replicas=2)
    with_replicas.groups[0] = GroupState(flowing=True)
    with_replicas.recorded_ids = {0: "id-a", 1: "id-a"}
    assert not with_replicas._to_the_end(0, [0, 1])  # replicas read the same range: always planned


def test_a_look_asks_the_earliest_offsets_only_when_due_after_a_failed_task_or_for_new_partitions(
        stack, engine, world, runner, datasource):
    world.marks = {0: (0, 10)}
    sup = make_supervisor(stack, engine, world, runner, datasource, useEarliestOffset=True)
    sup.ctx = replace(sup.ctx, policy=replace(POLICY, min_task_interval_s=1.5, earliest_max_age_s=30.0))
    sup.run_once()  # the first look asks for both
    assert world.earliest_asked == [{0}]
    for end in (20, 30, 40):  # published tasks: each next look asks for the latest offsets only
        (task,) = runner.running()
        world.marks = {0: (0, end)}
        finish(runner, task, really_publish=True, engine=engine)
        world.time += 1.5
        sup.run_once()
    assert world.earliest_asked == [{0}, set(), set(), set()] and sup.status.committed == {0: 30}
    world.marks = {0: (0, 50), 1: (7, 9)}  # a new partition: its earliest offset is asked, to pin it
    (task,) = runner.running()
    finish(runner, task, really_publish=True, engine=engine)
    world.time += 1.5
    sup.run_once()
    assert world.earliest_asked[-1] == {1} and sup.status.committed == {0: 40, 1: 7}
    world.time += 30.0
    world.marks = {0: (0, 60), 1: (7, 9)}
    (task,) = runner.running()
    finish(runner, task, really_publish=True, engine=engine)
    sup.run_once()  # 30 s on: asked again (the status shows them; retention moves them)
    assert world.earliest_asked[-1] == {0, 1}
    world.marks = {0: (55, 60), 1: (7, 9)}  # retention deleted records [50, 55) before they were read
    fail_read(runner, runner.running()[0])
    sup.run_once()  # after a failed task the next run looks, asks again, and finds the records gone
    assert world.earliest_asked[-1] == {0, 1}
    assert "records [50, 55) were deleted before they were indexed" in sup.stopped_partitions[0]


def test_a_replica_that_finds_its_range_published_is_a_success_not_a_failure(
        stack, engine, world, runner, datasource):
    world.marks = {0: (0, 10)}
    sup = make_supervisor(stack, engine, world, runner, datasource, useEarliestOffset=True, replicas=2)
    sup.run_once()
    winner, loser = runner.running()
    finish(runner, winner, really_publish=True, engine=engine)
    finish(runner, loser, really_publish=True, engine=engine)
    sup.run_once()
    statuses = {t.id: (t.status, t.detail) for t in sup.status.recent_tasks}
    assert statuses[loser.task_id] == ("SUCCESS", "another replica published this range first")
    assert sup.status.counters.lost_publish_races == 1 and sup.status.healthy


def test_failed_tasks_back_off_per_policy_and_turn_unhealthy(stack, engine, world, runner, datasource):
    world.marks = {0: (0, 10)}
    sup = make_supervisor(stack, engine, world, runner, datasource, useEarliestOffset=True)
    sup.run_once()
    (first,) = runner.running()
    finish(runner, first, "retryable")
    sup.run_once()
    assert runner.running() == [] and sup.status.state == "RUNNING"  # waits backoff_base_s = 10 s
    world.time += 9.9
    sup.run_once()
    assert runner.running() == []
    world.time += 0.2
    sup.run_once()
    (second,) = runner.running()
    assert second.start_offsets == first.start_offsets
    runner.tasks[second.task_id][1].set_exception(RuntimeError("executor lost"))
    sup.run_once()
    assert sup.status.state == "UNHEALTHY_TASKS" and not sup.status.healthy  # unhealthy_after = 2
    latest = sup.status.recent_errors[0].message
    assert "executor lost" in latest and "retrying in 20s" in latest
    world.time += 20.1
    sup.run_once()
    (third,) = runner.running()
    finish(runner, third, really_publish=True, engine=engine)
    sup.run_once()
    assert sup.status.state == "RUNNING" and sup.status.healthy


def test_one_cause_of_failure_is_one_recent_error_with_a_count_resolved_when_a_task_publishes(
        stack, engine, world, runner, datasource):
    world.marks = {0: (0, 10)}
    sup = make_supervisor(stack, engine, world, runner, datasource, useEarliestOffset=True)
    sup.run_once()
    for _ in range(3):  # the same failure under three task ids, each after its backoff
        (task,) = runner.running()
        runner.tasks[task.task_id][1].set_exception(RuntimeError("executor lost"))
        sup.run_once()
        world.time += 200
        sup.run_once()
    (error,) = sup.status.recent_errors
    assert error.count == 3 and error.resolved is None and error.first < error.last
    assert task.task_id in error.message  # the latest occurrence's wording

    finish(runner, runner.running()[0], really_publish=True, engine=engine)
    sup.run_once()
    (error,) = sup.status.recent_errors
    assert error.resolved is not None  # kept, apart: the status lists it under resolvedErrors
    world.marks, world.time = {0: (0, 20)}, world.time + 10  # more records: a new task
    sup.run_once()
    (task,) = runner.running()
    runner.tasks[task.task_id][1].set_exception(RuntimeError("executor lost"))
    sup.run_once()
    assert [(e.count, e.resolved is None) for e in sup.status.recent_errors] == [(1, True), (3, False)]


def test_a_task_past_completion_timeout_is_stopped(stack, engine, world, runner, datasource):
    world.marks = {0: (0, 10)}
    sup = make_supervisor(stack, engine, world, runner, datasource, useEarliestOffset=True, completionTimeout="PT60S")
    sup.run_once()
    (task,) = runner.running()
    world.time += 59
    sup.run_once()
    assert runner.stopped == []
    world.time += 2
    sup.run_once()
    assert runner.stopped == [task.task_id] and "exceeded completionTimeout" in sup.status.recent_errors[0].message


def test_an_unreachable_broker_makes_the_supervisor_unhealthy_until_it_is_back(
        stack, engine, world, runner, datasource):
    world.marks, world.broker_down = {0: (0, 10)}, True
    sup = make_supervisor(stack, engine, world, runner, datasource)
    sup.run_once()
    before = sup.status
    sup.run_once()
    assert sup.status.state == "UNHEALTHY_SUPERVISOR" and "broker unreachable" in sup.status.recent_errors[0].message
    assert before.state == "PENDING" and before is not sup.status  # snapshots are values: never updated in place
    world.broker_down = False
    sup.run_once()
    assert sup.status.state == "RUNNING"


def test_a_broker_that_goes_down_while_a_group_backs_off_still_makes_the_supervisor_unhealthy(
        stack, engine, world, runner, datasource):
    """Runs that need nothing from the broker (its group backs off) must not hide the failed looks between them."""
    world.marks = {0: (0, 10)}
    sup = make_supervisor(stack, engine, world, runner, datasource, useEarliestOffset=True)
    sup.ctx = replace(sup.ctx, policy=replace(POLICY, min_task_interval_s=1.5, watermarks_max_age_s=5.0))
    sup.run_once()
    finish(runner, runner.running()[0], "retryable")  # its group waits backoff_base_s (10 s)
    world.broker_down = True
    for _ in range(8):  # the idle poll, every second
        world.time += 1
        sup.run_once()
    assert sup.status.state == "UNHEALTHY_SUPERVISOR" and "broker unreachable" in sup.status.recent_errors[0].message
    world.broker_down = False
    world.time += 1
    sup.run_once()
    assert sup.status.state != "UNHEALTHY_SUPERVISOR"


def test_offsets_of_another_topic_are_refused_until_a_reset(stack, engine, world, runner, datasource):
    world.marks = {0: (0, 10)}
    publish(engine, PublishRequest(datasource, "topic-old", "t0", {0: 0}, {0: 7}, initial_offsets={0: 0}))
    sup = make_supervisor(stack, engine, world, runner, datasource)
    sup.run_once()
    assert runner.tasks == {} and "found offsets of 'topic-old'" in sup.status.recent_errors[0].message
    reset_offsets(engine, datasource, None)
    sup.run_once()
    (task,) = runner.running()  # the reset forgot topic-old: earliest offsets of topic-a are pinned and read
    assert (dict(task.start_offsets), dict(task.end_offsets)) == ({0: 0}, {0: 10})
    assert sup.status.committed == {0: 0} and sup.status.state == "RUNNING"


def test_a_topic_pattern_spreads_each_topics_partitions_over_the_groups_and_may_change(
        stack, engine, world, runner, datasource):
    """Offsets of a pattern name their topics, so another pattern goes on from them; a single topic's
    offsets (bare partition numbers) are refused until a reset.
    """
    world.marks = {TopicPartitionId(topic, p): (0, 10) for topic in ("clicks", "views") for p in range(4)}
    sup = make_supervisor(stack, engine, world, runner, datasource, topic=None, topicPattern="clicks|views",
                          taskCount=2, useEarliestOffset=True)
    sup.run_once()
    tasks = runner.running()
    assert len(tasks) == 2 and sorted(p for t in tasks for p in t.start_offsets) == sorted(world.marks)
    for task in tasks:  # each group reads two partitions of each topic
        assert Counter(p.topic for p in task.start_offsets) == {"clicks": 2, "views": 2}
    for task in tasks:
        finish(runner, task, really_publish=True, engine=engine)

    world.marks[TopicPartitionId("orders", 0)] = (0, 5)
    changed = make_supervisor(stack, engine, world, runner, datasource, topic=None, topicPattern="views|orders")
    changed.run_once()
    (task,) = changed.active.values()  # views go on from their committed offsets, orders from its earliest
    assert task.request.start_offsets.to_json() == {"orders:0": 0, **{f"views:{p}": 10 for p in range(4)}}
    assert changed.status.healthy and not changed.status.recent_errors

    single = make_supervisor(stack, engine, world, runner, f"{datasource}_single")
    publish(engine, PublishRequest(single.spec.datasource, "topic-a", "t0", {0: 0}, {0: 7}, initial_offsets={0: 0}))
    pattern = make_supervisor(stack, engine, world, runner, single.spec.datasource, topic=None, topicPattern="topic-a")
    pattern.run_once()
    refused = pattern.status.recent_errors[0].message
    assert "expected committed offsets of '(topicPattern)', found offsets of 'topic-a'" in refused


def test_a_topic_created_after_a_pattern_matched_none_starts_at_earliest(stack, engine, world, runner, datasource):
    """The first run is the one that pins the stream, even with no partition to pin: a topic the pattern comes
    to match later is read from its earliest offset, whatever useEarliestOffset says.
    """
    sup = make_supervisor(stack, engine, world, runner, datasource, topic=None, topicPattern="m-.*",
                          useEarliestOffset=False)
    sup.run_once()
    assert runner.tasks == {} and sup.status.healthy
    world.marks = {TopicPartitionId("m-a", 0): (0, 500)}
    sup.run_once()
    (task,) = runner.running()
    assert (task.start_offsets.to_json(), task.end_offsets.to_json()) == ({"m-a:0": 0}, {"m-a:0": 500})


def test_a_partition_no_longer_read_leaves_the_lag(stack, engine, world, runner, datasource):
    world.marks = {TopicPartitionId(topic, 0): (0, 10) for topic in ("a", "b")}
    sup = make_supervisor(stack, engine, world, runner, datasource, topic=None, topicPattern="a|b",
                          useEarliestOffset=True)
    sup.run_once()
    assert set(sup.status.lag_seconds) == set(world.marks)
    sup.spec = load_supervisor_spec(spec_json(datasource, None, topicPattern="b"))  # a spec update
    world.time += 60
    sup.run_once()
    assert set(sup.status.lag_seconds) == set(sup.status.lag) == {TopicPartitionId("b", 0)}


def test_a_partition_that_appears_later_starts_at_earliest_whatever_the_spec_says(
        stack, engine, world, runner, datasource):
    """Druid's rule: only the first run uses useEarliestOffset=false; records produced to a new
    partition before the supervisor saw it must not be skipped.
    """
    world.marks = {0: (0, 100)}
    sup = make_supervisor(stack, engine, world, runner, datasource, useEarliestOffset=False)
    sup.run_once()
    assert sup.status.committed == {0: 100} and runner.tasks == {}
    world.marks[1] = (0, 7)  # partition 1 was added, and 7 records went to it before this run
    sup.run_once()
    (task,) = runner.running()
    assert (dict(task.start_offsets), dict(task.end_offsets)) == ({0: 100, 1: 0}, {0: 100, 1: 7})


def test_a_task_planned_before_a_reset_cannot_publish_after_it(stack, engine, world, runner, datasource):
    """Even when its start equals the offsets committed after the reset: the epoch fences it."""
    world.marks = {0: (0, 10)}
    sup = make_supervisor(stack, engine, world, runner, datasource, useEarliestOffset=True)
    sup.run_once()
    (stale,) = runner.running()
    reset_offsets(engine, datasource, None)
    sup.run_once()  # pins the earliest offset again: 0, the stale task's start
    assert sup.status.committed == {0: 0} and runner.running() == [stale]
    finish(runner, stale, really_publish=True, engine=engine)
    sup.run_once()
    (failed,) = sup.status.recent_tasks
    assert failed.status == "FAILED" and "the offsets were reset after this task was planned" in failed.detail
    stored = committed_offsets(engine, datasource)
    assert stored is not None and dict(stored.offsets) == {0: 0} and stored.epoch == 1


def test_a_backlog_is_worked_off_by_a_sequence_of_bounded_tasks(stack, engine, world, runner, datasource):
    """A task reads at most policy.max_records_per_task offsets, shared among its partitions."""
    world.marks = {0: (0, 100), 1: (0, 7)}
    sup = make_supervisor(stack, engine, world, runner, datasource, useEarliestOffset=True)
    sup.ctx = replace(sup.ctx, policy=replace(POLICY, max_records_per_task=30))
    ranges = []
    for _ in range(10):
        sup.run_once()
        running = runner.running()
        if not running:
            break
        (task,) = running
        ranges.append((dict(task.start_offsets), dict(task.end_offsets)))
        finish(runner, task, really_publish=True, engine=engine)
    assert ranges == [({0: 0, 1: 0}, {0: 23, 1: 7}), ({0: 23, 1: 7}, {0: 53, 1: 7}),
                      ({0: 53, 1: 7}, {0: 83, 1: 7}), ({0: 83, 1: 7}, {0: 100, 1: 7})]
    assert sup.status.committed == {0: 100, 1: 7}


def test_completion_timeout_counts_from_the_start_not_from_the_queue(stack, engine, world, runner, datasource):
    world.marks, runner.slots_free = {0: (0, 10)}, False
    sup = make_supervisor(stack, engine, world, runner, datasource, useEarliestOffset=True, completionTimeout="PT60S")
    sup.run_once()
    (task,) = runner.running()
    world.time += 600  # ten minutes waiting for a slot: not stopped, but said, once
    sup.run_once()
    sup.run_once()
    assert runner.stopped == []
    waiting = [e.message for e in sup.status.recent_errors if "waiting for a task slot" in e.message]
    assert len(waiting) == 1 and task.task_id in waiting[0] and "OVERLORD_TASK_SLOTS" in waiting[0]
    runner.start_queued()
    world.time += 59
    sup.run_once()
    assert runner.stopped == []
    world.time += 2
    sup.run_once()
    assert runner.stopped == [task.task_id]


def test_a_task_cancelled_before_it_started_is_booked_as_failed(stack, engine, world, runner, datasource):
    """At shutdown the runner cancels tasks still waiting for a slot: booking them must not raise."""
    world.marks, runner.slots_free = {0: (0, 10)}, False
    sup = make_supervisor(stack, engine, world, runner, datasource, useEarliestOffset=True)
    sup.run_once()
    (task,) = runner.running()
    assert runner.tasks[task.task_id][1].cancel()
    sup.update_task_status()  # what Overlord.stop calls directly, outside run_once's error handling
    (booked,) = sup.recent_tasks
    assert booked.status == "FAILED" and "never started" in booked.detail


def test_offsets_that_go_backwards_make_the_supervisor_unhealthy_naming_the_partition(
        stack, engine, world, runner, datasource):
    world.marks = {0: (0, 10), 1: (0, 10)}
    sup = make_supervisor(stack, engine, world, runner, datasource, useEarliestOffset=True, taskCount=2)
    sup.run_once()
    for task in runner.running():
        finish(runner, task, really_publish=True, engine=engine)
    world.marks = {0: (0, 10), 1: (0, 4)}  # topic recreated, or an unclean leader election lost records
    for _ in range(POLICY.unhealthy_after):
        sup.run_once()
    assert sup.status.state == "UNHEALTHY_SUPERVISOR" and runner.running() == []
    assert "partition 1: committed offset 10 is past the latest offset 4" in sup.status.recent_errors[0].message


def test_a_partition_out_of_range_stops_alone_until_its_offsets_are_reset(stack, engine, world, runner, datasource):
    world.marks = {0: (0, 10), 1: (0, 10)}
    sup = make_supervisor(stack, engine, world, runner, datasource, useEarliestOffset=True)
    sup.run_once()
    finish(runner, runner.running()[0], really_publish=True, engine=engine)
    world.marks = {0: (0, 30), 1: (0, 4)}  # partition 1 recreated; partition 0 goes on receiving
    sup.run_once()
    (task,) = runner.running()
    assert (dict(task.start_offsets), dict(task.end_offsets)) == ({0: 10}, {0: 30})  # before: no task at all
    assert sup.status.state == "UNHEALTHY_SUPERVISOR"
    assert "committed offset 10 is past the latest offset 4" in sup.status.stopped_partitions[1]
    finish(runner, task, really_publish=True, engine=engine)
    sup.run_once()
    sup.run_once()
    messages = [e.message for e in sup.status.recent_errors]
    assert [m for m in messages if "partition 1" in m] == [sup.status.stopped_partitions[1]]  # once

    reset_offsets(engine, datasource, {1: 0})  # the operator's choice: the new topic from its start
    sup.run_once()
    (again,) = runner.running()
    assert (dict(again.start_offsets), dict(again.end_offsets)) == ({0: 30, 1: 0}, {0: 30, 1: 4})
    assert sup.status.stopped_partitions == {} and sup.status.state == "RUNNING"


def test_records_lost_to_retention_are_loud_by_default(stack, engine, world, runner, datasource):
    world.marks = {0: (0, 10)}
    sup = make_supervisor(stack, engine, world, runner, datasource, useEarliestOffset=True)
    sup.run_once()
    finish(runner, runner.running()[0], really_publish=True, engine=engine)
    world.marks = {0: (25, 40)}  # retention deleted [10, 25) before it was read
    sup.run_once()  # the earliest offsets were asked for less than earliest_max_age_s ago: a task reads from 10
    fail_read(runner, runner.running()[0])
    for _ in range(POLICY.unhealthy_after):
        sup.run_once()  # the failed task makes the next look ask for them
    assert sup.status.state == "UNHEALTHY_SUPERVISOR" and runner.running() == []
    assert "partition 0: records [10, 25) were deleted before they were indexed" in sup.status.recent_errors[0].message
    assert sup.status.committed == {0: 10}


def test_reset_offset_automatically_skips_the_gap_and_says_exactly_what(stack, engine, world, runner, datasource):
    world.marks = {0: (0, 10)}
    sup = make_supervisor(stack, engine, world, runner, datasource, useEarliestOffset=True)
    sup.spec = load_supervisor_spec({**sup.spec.to_druid_json(), "spec": {
        **sup.spec.to_druid_json()["spec"],
        "tuningConfig": {**sup.spec.to_druid_json()["spec"]["tuningConfig"], "resetOffsetAutomatically": True}}})
    sup.run_once()
    finish(runner, runner.running()[0], really_publish=True, engine=engine)
    world.marks = {0: (25, 40)}
    sup.run_once()
    fail_read(runner, runner.running()[0])
    sup.run_once()
    world.time += POLICY.backoff_base_s
    sup.run_once()
    (task,) = runner.running()
    assert (dict(task.start_offsets), dict(task.end_offsets)) == ({0: 25}, {0: 40})
    assert "skipped records [10, 25) of partition 0" in sup.status.recent_errors[0].message
    assert sup.status.healthy
    [skip] = [t for t in sup.ctx.store.tasks(datasource=datasource) if t.type == "reset_offsets"]  # kept for good
    assert (dict(skip.start_offsets), dict(skip.end_offsets), skip.status) == ({0: 10}, {0: 25}, "SUCCESS")
    assert skip.status_detail is not None and "skipped records [10, 25) of partition 0" in skip.status_detail


def test_an_automatic_skip_never_moves_offsets_back_past_a_publish_made_meanwhile(
        stack, engine, world, runner, datasource):
    world.marks = {0: (0, 10)}
    sup = make_supervisor(stack, engine, world, runner, datasource, useEarliestOffset=True)
    raw = sup.spec.to_druid_json()
    raw["spec"]["tuningConfig"]["resetOffsetAutomatically"] = True
    sup.spec = load_supervisor_spec(raw)
    sup.run_once()
    finish(runner, runner.running()[0], really_publish=True, engine=engine)
    world.marks = {0: (25, 40)}  # [10, 25) deleted by retention
    world.time += POLICY.earliest_max_age_s  # the next look asks for the earliest offsets
    read = sup.read_committed_offsets

    def then_another_overlord_skips_and_publishes() -> None:
        read()  # this supervisor saw offset 10; another one (the new leader) moves on meanwhile
        _, moved = reset_offsets(engine, datasource, {0: 25})
        assert publish(engine, PublishRequest(datasource, sup.spec.spec.io_config.stream, "other", {0: 25},
                                              {0: 40}, epoch=moved.epoch)).ok

    sup.read_committed_offsets = then_another_overlord_skips_and_publishes  # type: ignore[method-assign]
    sup.run_once()
    assert world.earliest_asked[-1] == {0}
    stored = committed_offsets(engine, datasource)
    assert stored is not None and dict(stored.offsets) == {0: 40}  # before: moved back to 25, [25, 40) read twice


def test_the_5_and_15_minute_rates_count_every_task_in_their_window():
    """Three tasks a second for 15 minutes: every window sees the same 300 records/s (the old
    512-sample buffer spanned under three minutes and read the longer windows several times low).
    """
    from overlord.supervisor.loop import Counters

    counters = Counters()
    for i in range(3 * 900):
        counters.count_processed(now=i / 3, records=100)
    now = 900.0
    for window in (60, 300, 900):
        assert counters.rate(now, window) == pytest.approx(300, rel=0.02), window


def test_lag_in_seconds_is_how_long_the_oldest_unpublished_record_has_waited(stack, engine, world, runner,
                                                                             datasource):
    world.marks = {0: (0, 10)}
    sup = make_supervisor(stack, engine, world, runner, datasource, useEarliestOffset=True)
    sup.run_once()  # offsets 0-9 first seen at t=1000; a task reads [0, 10)
    [first] = runner.running()
    world.time, world.marks = 1030.0, {0: (0, 25)}  # 10-24 arrive, first seen at t=1030
    sup.run_once()
    assert sup.status.lag_seconds == {0: 30.0}  # offset 0 has waited since t=1000

    world.time = 1045.0
    finish(runner, first, really_publish=True, engine=engine)
    sup.run_once()  # [0, 10) published: the oldest unpublished record, offset 10, was first seen at t=1030
    assert sup.status.lag_seconds == {0: 15.0}
    [second] = runner.running()
    world.time = 1050.0
    finish(runner, second, really_publish=True, engine=engine)
    sup.run_once()
    assert sup.status.lag == {0: 0} and sup.status.lag_seconds == {0: 0.0}


def test_a_re_created_topic_stops_until_reset_even_when_it_holds_more_records(
        stack, engine, runner, make_topic, datasource):
    """The issue's reproduction on the real broker: 5 records committed, the topic deleted and re-created, 8
    produced. Offsets alone cannot tell (8 > 5); the broker's topic ID can, and the stop outlives a restart.
    """
    from confluent_kafka.admin import AdminClient, NewTopic

    from overlord.dev.sample_data import produce

    topic = make_topic(1)
    produce(stack.bootstrap_servers, topic, [b'{"n": %d}' % i for i in range(5)], 1)
    store = MetadataStore(engine)
    ctx = SupervisorContext(engine, store, runner, stack.settings("/unused"), lambda _id: None,  # type: ignore[arg-type]
                            POLICY)  # the real watermarks and topic IDs

    def supervisor() -> Supervisor:
        return Supervisor(datasource, load_supervisor_spec(spec_json(datasource, topic, useEarliestOffset=True)),
                          False, ctx)

    sup = supervisor()
    sup.run_once()
    finish(runner, runner.running()[0], really_publish=True, engine=engine)
    sup.run_once()
    assert sup.status.committed == {0: 5} and sup.status.stopped_partitions == {}

    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    for future in admin.delete_topics([topic]).values():
        future.result(timeout=10)
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(timeout=10)
    produce(stack.bootstrap_servers, topic, [b'{"n": %d}' % i for i in range(8)], 1)

    sup.run_once()  # its last task published records: the next reads to the end, planned without a look
    (blind,) = runner.running()
    assert blind.read_to_end
    finish(runner, blind, really_publish=True, engine=engine,  # the new topic's ID, as the task sees it after its read
           topic_ids={0: stream_topic_ids({"bootstrap.servers": stack.bootstrap_servers}, [topic])[topic]})
    sup.run_once()
    assert "re-created" in sup.status.recent_tasks[0].detail and sup.status.committed == {0: 5}
    for restarted in (False, True):  # the stop is durable: an overlord restarted meanwhile stops it too
        if restarted:
            sup = supervisor()
        for _ in range(POLICY.unhealthy_after):
            sup.run_once()
        assert runner.running() == [], "read records [5, 8) of the new topic as if they followed the old one"
        assert "was re-created" in sup.status.stopped_partitions[0]
        assert sup.status.state == "UNHEALTHY_SUPERVISOR" and sup.status.committed == {0: 5}
        assert sup.status.lag == {0: 8}, "the old topic's committed offset is no place in the new one: all 8 wait"
    with pytest.raises(TopicChanged, match="re-created"):  # nor does `overlord index` read it
        next_task_request(engine, ctx.settings, sup.spec)

    reset_offsets(engine, datasource, {0: 0})  # the operator's choice: the new topic from its start
    sup.run_once()
    (task,) = runner.running()
    assert (dict(task.start_offsets), dict(task.end_offsets)) == ({0: 0}, {0: 8})
    assert sup.status.stopped_partitions == {} and sup.status.state == "RUNNING"


def test_resetting_one_partition_of_a_re_created_topic_leaves_the_others_stopped(
        stack, engine, world, runner, datasource):
    world.marks, world.ids = {0: (0, 10), 1: (0, 10)}, {"topic-a": "old-id"}
    sup = make_supervisor(stack, engine, world, runner, datasource, useEarliestOffset=True)
    sup.run_once()
    finish(runner, runner.running()[0], really_publish=True, engine=engine)
    world.marks, world.ids = {0: (0, 20), 1: (0, 20)}, {"topic-a": "new-id"}  # re-created, and holds more
    sup.run_once()
    (blind,) = runner.running()  # planned without a look: its publish finds the topic's new ID
    finish(runner, blind, really_publish=True, engine=engine, topic_ids={0: "new-id", 1: "new-id"})
    sup.run_once()  # the refusal is booked, and the look that follows finds the new topic
    assert "re-created" in sup.status.recent_tasks[0].detail
    assert set(sup.status.stopped_partitions) == {0, 1} and runner.running() == []
    world.time += POLICY.backoff_s(1)

    reset_offsets(engine, datasource, {0: 0})
    sup.run_once()
    (task,) = runner.running()
    assert (dict(task.start_offsets), dict(task.end_offsets)) == ({0: 0}, {0: 20})
    assert set(sup.status.stopped_partitions) == {1}
    assert "topic ID old-id is now new-id" in sup.status.stopped_partitions[1]

    reset_offsets(engine, datasource, None)  # a full reset forgets every partition's topic ID
    finish(runner, task, "conflict")
    sup.run_once()
    assert sup.status.stopped_partitions == {}


def test_a_rate_in_the_first_minute_divides_by_the_time_counted_not_the_whole_window():
    """A steady 500 records/s for the first 30 s: 500/s, not 250 (the window's 60 s had not passed)."""
    from overlord.supervisor.loop import Counters

    counters = Counters(started=1000.0)
    for i in range(30 * 2):
        counters.count_processed(now=1000.0 + (i + 1) / 2, records=250)
    assert counters.rate(1030.0, 60) == pytest.approx(500, rel=0.02)
    assert counters.rate(1030.0, 900) == pytest.approx(500, rel=0.02)


def test_a_supervisor_plans_from_its_own_publish_and_reads_the_offsets_only_when_they_may_have_moved(
        stack, engine, world, runner, datasource):
    """Issue 51: every run read the committed offsets (~1 ms of the leader's CPU each, three runs a task)."""
    reads: list[str] = []
    counting = sa.create_engine(engine.url)
    sa.event.listen(counting, "before_cursor_execute", lambda _c, _cur, statement, *_: reads.append(statement)
                    if "FROM datasource_offsets" in statement and "FOR UPDATE" not in statement else None)
    try:
        world.marks = {0: (0, 10)}
        sup = make_supervisor(stack, counting, world, runner, datasource, useEarliestOffset=True)
        sup.run_once()
        assert len(reads) == 1
        finish(runner, runner.running()[0], really_publish=True, engine=engine)
        world.marks = {0: (0, 25)}
        for _ in range(3):
            sup.run_once()
        (task,) = runner.running()
        assert (dict(task.start_offsets), task.generation) == ({0: 10}, 2)  # planned from the publish's row
        assert len(reads) == 1
        world.time += POLICY.watermarks_max_age_s
        sup.run_once()
        assert len(reads) == 2  # and again once they are that old
        finish(runner, task, "retryable")
        sup.run_once()
        assert len(reads) == 3  # and after a task failed
    finally:
        counting.dispose()


def test_a_busy_topic_launches_once_its_task_holds_the_target_and_a_trickle_waits_the_interval(
        stack, engine, world, runner, datasource):
    """Issue 51: at 500 events/s a task every 1.5 s kept records waiting ~1.5 s; with a target of 250 records
    its group is due every 0.5 s, while a topic at 10 events/s still waits the interval.
    """
    world.marks = {0: (0, 0)}
    sup = make_supervisor(stack, engine, world, runner, datasource, useEarliestOffset=True)
    sup.ctx = replace(sup.ctx, policy=replace(POLICY, min_task_interval_s=1.5, target_records=250, idle_poll_s=10.0))
    sup.run_once()
    published = 0
    for second in range(1, 11):  # 500 records a second
        world.time += 1
        world.marks = {0: (0, 500 * second)}
        sup.run_once()
        for task in runner.running():
            finish(runner, task, really_publish=True, engine=engine)
            published = task.end_offsets[0]
        sup.run_once()
    assert sup.next_run_in_s() == pytest.approx(0.5, abs=0.1)  # 250 records at ~500/s (the last 10 s)
    world.time += sup.next_run_in_s()
    world.marks = {0: (0, published + 250)}
    sup.run_once()
    (task,) = runner.running()
    assert dict(task.end_offsets) == {0: published + 250}  # launched ~0.5 s after the last, not 1.5 s

    quiet = make_supervisor(stack, engine, world, runner, datasource + "_quiet", useEarliestOffset=True)
    quiet.ctx = replace(quiet.ctx, policy=sup.ctx.policy)
    world.marks = {0: (0, 10)}
    quiet.run_once()
    (first,) = [t for t in runner.running() if t.spec.datasource == quiet.spec.datasource]
    finish(runner, first, really_publish=True, engine=engine)
    world.marks = {0: (0, 20)}
    quiet.run_once()
    assert quiet.next_run_in_s() == pytest.approx(1.5)  # 10 records a second: the whole interval


def test_a_task_that_waited_for_a_slot_reads_up_to_the_latest_offsets_when_it_starts(
        stack, engine, world, runner, datasource):
    """Issue 51: a task planned [committed, latest at launch) that then waited 2 s for a slot left the records of
    those 2 s to the next task; freshness paid the queue twice. Extended as it starts, it reads them too.
    """
    world.marks = {0: (0, 10), 1: (0, 10)}
    sup = make_supervisor(stack, engine, world, runner, datasource, useEarliestOffset=True)
    sup.ctx = replace(sup.ctx, policy=replace(POLICY, max_records_per_task=100))
    sup.run_once()
    (task,) = runner.running()
    extend = runner.extend[task.task_id]
    assert extend(task) is task  # started at once: nothing to add
    world.time += 2
    world.marks = {0: (0, 40), 1: (0, 200)}
    extended = extend(task)
    assert dict(extended.start_offsets) == {0: 0, 1: 0}
    assert dict(extended.end_offsets) == {0: 40, 1: 60}  # up to the latest, within max_records_per_task
    world.broker_down = True
    assert extend(task) is task  # no answer: the range planned at launch
    world.broker_down = False
    finish(runner, extended, really_publish=True, engine=engine)
    sup.run_once()
    assert sup.committed == {0: 40, 1: 60} and dict(sup.status.recent_tasks[0].end_offsets) == {0: 40, 1: 60}

    replicated = make_supervisor(stack, engine, world, runner, datasource + "_r", useEarliestOffset=True, replicas=2)
    replicated.run_once()
    first = next(t for t in runner.running() if t.spec.datasource == replicated.spec.datasource)
    world.time += 2
    world.marks = {0: (0, 80), 1: (0, 80)}
    assert runner.extend[first.task_id](first) is first  # replicas must read the same range
