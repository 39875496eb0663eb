"""The publish transaction against real PostgreSQL: the start-offset truth table, segment
numbering, resets, and races between connections. Every test reads back what is stored.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from overlord.dev.stack import free_port
from segment_store import (
    Offsets,
    PublishOutcome,
    PublishRequest,
    SegmentDescriptor,
    check_topic_ids,
    committed_offsets,
    pin_offsets,
    publish,
    reset_offsets,
    skip_offsets,
    used_segments,
)
from segment_store.database import metadata_engine
from segment_store.leadership import claim_leadership
from segment_store.publish import publish_many
from segment_store.schema import segments as segments_t
from specs import SEVERAL_TOPICS
from tests.helpers import wait_for_lock_waiter

TOPIC = "events"
HOUR = datetime(2025, 1, 1, 10, tzinfo=UTC)


def seg(ds: str, name: str, start: datetime = HOUR, **details: Any) -> SegmentDescriptor:
    """A segment whose id is ``{ds}/{name}`` (ids are unique across datasources)."""
    return SegmentDescriptor(id=f"{ds}/{name}", datasource=ds, interval_start=start,
                             interval_end=start + timedelta(hours=1), path=f"/deep/{ds}/{name}.parquet",
                             size_bytes=100, num_rows=10, details=details)


def req(ds: str, start: Mapping[Any, int], end: Mapping[Any, int], initial: Mapping[Any, int] | None = None,
        segments: tuple[SegmentDescriptor, ...] = (), topic: str = TOPIC, task: str = "",
        names: tuple[str, ...] = (), epoch: int = 0) -> PublishRequest:
    """A task's publish request; ``names`` adds one hour-long segment per name."""
    segments = segments + tuple(seg(ds, n) for n in names)
    return PublishRequest(datasource=ds, topic=topic, task_id=task or f"task-{uuid.uuid4().hex[:6]}",
                          start_offsets=start, end_offsets=end, initial_offsets=initial or {},
                          segments=segments, epoch=epoch)


def stored_offsets(engine: sa.Engine, ds: str) -> dict[int, int] | None:
    found = committed_offsets(engine, ds)
    return None if found is None else dict(found.offsets)


def name(segment_id: str) -> str:
    return segment_id.split("/", 1)[1]


def used_names(engine: sa.Engine, ds: str) -> list[tuple[str, int, int]]:
    """The used segments as read back by ``used_segments``: (name, version, partition_num)."""
    return [(name(s.id), s.version, s.partition_num) for s in used_segments(engine, ds)]


def all_segment_rows(engine: sa.Engine, ds: str) -> list[tuple[str, int, int, bool]]:
    """Every segment row of the datasource, used or not: (name, version, partition_num, used)."""
    s = segments_t.c
    query = sa.select(s.id, s.version, s.partition_num, s.used).where(s.datasource == ds).order_by(
        s.interval_start, s.version, s.partition_num)
    with engine.connect() as conn:
        return [(name(row.id), row.version, row.partition_num, row.used) for row in conn.execute(query)]


@pytest.fixture()
def hooked_engine(engine: sa.Engine) -> Iterator[Callable[[str, Callable[..., None]], sa.Engine]]:
    """A private engine on the same database with a cursor-execute hook (the session engine stays clean)."""
    engines: list[sa.Engine] = []

    def make(event: str, hook: Callable[..., None]) -> sa.Engine:
        eng = sa.create_engine(engine.url, pool_size=10)
        sa.event.listen(eng, event, hook)
        engines.append(eng)
        return eng

    yield make
    for eng in engines:
        eng.dispose()


# --- the start-offset truth table -------------------------------------------------------------

def test_start_equal_to_committed_offset_is_ok(engine: sa.Engine, datasource: str) -> None:
    assert publish(engine, req(datasource, {0: 0}, {0: 10}, initial={0: 0})).ok
    outcome = publish(engine, req(datasource, {0: 10}, {0: 25}, names=("a",)))
    assert outcome.ok and dict(outcome.committed) == {0: 25}
    found = committed_offsets(engine, datasource)
    assert found is not None and (found.topic, dict(found.offsets), found.version) == (TOPIC, {0: 25}, 2)
    assert used_names(engine, datasource) == [("a", 1, 0)]


def test_committed_behind_start_is_retryable_and_writes_nothing(engine: sa.Engine, datasource: str) -> None:
    assert publish(engine, req(datasource, {0: 0}, {0: 10}, initial={0: 0})).ok
    outcome = publish(engine, req(datasource, {0: 20}, {0: 30}, names=("late",)))
    assert outcome.status == "retryable"
    assert "expected committed offset 20, found 10" in outcome.message and "partition 0" in outcome.message
    assert dict(outcome.committed) == {0: 10}
    found = committed_offsets(engine, datasource)
    assert found is not None and dict(found.offsets) == {0: 10} and found.version == 1
    assert all_segment_rows(engine, datasource) == []


def test_committed_at_end_is_already_published_and_writes_nothing(engine: sa.Engine, datasource: str) -> None:
    """A replica or retry of a published range: its own outcome, so nobody has to infer it."""
    assert publish(engine, req(datasource, {0: 0}, {0: 10}, initial={0: 0}, names=("a",))).ok
    outcome = publish(engine, req(datasource, {0: 0}, {0: 10}, initial={0: 0}, names=("b",)))
    assert outcome.status == "already_published" and not outcome.ok
    assert f"datasource {datasource!r} partition 0: expected committed offset 0, found 10" in outcome.message
    found = committed_offsets(engine, datasource)
    assert found is not None and dict(found.offsets) == {0: 10} and found.version == 1
    assert [row[0] for row in all_segment_rows(engine, datasource)] == ["a"]


def test_committed_past_end_is_already_published(engine: sa.Engine, datasource: str) -> None:
    assert publish(engine, req(datasource, {0: 0}, {0: 10}, initial={0: 0})).ok
    assert publish(engine, req(datasource, {0: 10}, {0: 20})).ok
    outcome = publish(engine, req(datasource, {0: 0}, {0: 10}, names=("late-replica",)))
    assert outcome.status == "already_published"
    assert stored_offsets(engine, datasource) == {0: 20} and all_segment_rows(engine, datasource) == []


def test_committed_inside_the_range_is_fatal(engine: sa.Engine, datasource: str) -> None:
    """Part of the range was published by another task (e.g. after resetOffsets): never write it twice."""
    assert publish(engine, req(datasource, {0: 0}, {0: 5}, initial={0: 0})).ok
    outcome = publish(engine, req(datasource, {0: 0}, {0: 10}, names=("overlap",)))
    assert outcome.status == "fatal" and "part of this range was published by another task" in outcome.message
    assert stored_offsets(engine, datasource) == {0: 5} and all_segment_rows(engine, datasource) == []


def test_some_partitions_published_others_not_is_fatal(engine: sa.Engine, datasource: str) -> None:
    """Publishing would write partition 1 again and move its offset back."""
    assert publish(engine, req(datasource, {0: 0, 1: 0}, {0: 0, 1: 0}, initial={0: 0, 1: 0})).ok
    assert publish(engine, req(datasource, {1: 0}, {1: 10})).ok
    outcome = publish(engine, req(datasource, {0: 0, 1: 0}, {0: 10, 1: 10}, names=("mixed",)))
    assert outcome.status == "fatal" and "partition 1" in outcome.message
    assert stored_offsets(engine, datasource) == {0: 0, 1: 10} and all_segment_rows(engine, datasource) == []


def test_any_fatal_partition_makes_the_outcome_fatal(engine: sa.Engine, datasource: str) -> None:
    assert publish(engine, req(datasource, {0: 0, 1: 0}, {0: 10, 1: 10}, initial={0: 0, 1: 0})).ok
    outcome = publish(engine, req(datasource, {0: 20, 1: 5}, {0: 30, 1: 15}))  # 0 behind, 1 ahead
    assert outcome.status == "fatal"
    assert "partition 1: expected committed offset 5, found 10" in outcome.message
    assert stored_offsets(engine, datasource) == {0: 10, 1: 10}


def test_no_row_and_start_equal_to_initial_offset_is_ok(engine: sa.Engine, datasource: str) -> None:
    assert committed_offsets(engine, datasource) is None
    outcome = publish(engine, req(datasource, {0: 7, 1: 3}, {0: 9, 1: 3}, initial={0: 7, 1: 3}))
    assert outcome.ok
    found = committed_offsets(engine, datasource)
    assert found is not None and (found.topic, dict(found.offsets), found.version) == (TOPIC, {0: 9, 1: 3}, 1)


@pytest.mark.parametrize(("initial", "expected"), [
    ({0: 7}, "partition 0: no committed offset: expected start 7 (initial offset), found 5"),
    ({}, "partition 0: no committed offset and no initial offset"),
])
def test_no_row_and_start_not_equal_to_initial_offset_is_fatal(
        engine: sa.Engine, datasource: str, initial: dict[int, int], expected: str) -> None:
    outcome = publish(engine, req(datasource, {0: 5}, {0: 9}, initial=initial, names=("x",)))
    assert outcome.status == "fatal" and expected in outcome.message and datasource in outcome.message
    assert committed_offsets(engine, datasource) is None  # the placeholder row was rolled back too
    assert all_segment_rows(engine, datasource) == []


def test_new_partition_starts_at_its_initial_offset(engine: sa.Engine, datasource: str) -> None:
    assert publish(engine, req(datasource, {0: 0}, {0: 10}, initial={0: 0})).ok
    assert publish(engine, req(datasource, {0: 10, 1: 4}, {0: 20, 1: 8}, initial={1: 4})).ok
    assert stored_offsets(engine, datasource) == {0: 20, 1: 8}


def test_empty_publish_advances_offsets(engine: sa.Engine, datasource: str) -> None:
    assert publish(engine, req(datasource, {0: 0}, {0: 10}, initial={0: 0})).ok
    assert publish(engine, req(datasource, {0: 10}, {0: 10})).ok  # nothing new: still a valid publish
    assert stored_offsets(engine, datasource) == {0: 10}
    assert all_segment_rows(engine, datasource) == []
    found = committed_offsets(engine, datasource)
    assert found is not None and found.version == 2


def test_publish_of_a_partition_subset_leaves_other_partitions_untouched(
        engine: sa.Engine, datasource: str) -> None:
    initial = {0: 0, 1: 0, 2: 0}
    assert publish(engine, req(datasource, initial, {0: 10, 1: 20, 2: 30}, initial=initial)).ok
    assert publish(engine, req(datasource, {1: 20}, {1: 25})).ok
    assert stored_offsets(engine, datasource) == {0: 10, 1: 25, 2: 30}


def test_topic_mismatch_is_fatal(engine: sa.Engine, datasource: str) -> None:
    assert publish(engine, req(datasource, {0: 0}, {0: 10}, initial={0: 0})).ok
    outcome = publish(engine, req(datasource, {0: 10}, {0: 20}, topic="other", names=("a",)))
    assert outcome.status == "fatal" and f"expected topic 'other', found {TOPIC!r}" in outcome.message
    found = committed_offsets(engine, datasource)
    assert found is not None and found.topic == TOPIC and dict(found.offsets) == {0: 10}
    assert all_segment_rows(engine, datasource) == []


# --- several topics (topicPattern): offsets keyed by topic and partition ----------------------

def test_each_topic_partition_has_its_own_committed_offset(engine: sa.Engine, datasource: str) -> None:
    """``clicks:0`` and ``views:0`` are different partitions: the truth table holds for each on its own."""
    start = {"clicks:0": 0, "views:0": 0}
    assert publish(engine, req(datasource, start, {"clicks:0": 10, "views:0": 4}, initial=start,
                               topic=SEVERAL_TOPICS)).ok
    assert publish(engine, req(datasource, {"views:0": 4}, {"views:0": 9}, topic=SEVERAL_TOPICS)).ok
    found = committed_offsets(engine, datasource)
    assert found is not None and found.topic == SEVERAL_TOPICS
    assert found.offsets.to_json() == {"clicks:0": 10, "views:0": 9}

    behind = publish(engine, req(datasource, {"clicks:0": 12}, {"clicks:0": 20}, topic=SEVERAL_TOPICS))
    assert behind.status == "retryable"
    assert "partition clicks:0: expected committed offset 12, found 10" in behind.message
    replica = publish(engine, req(datasource, {"views:0": 4}, {"views:0": 9}, topic=SEVERAL_TOPICS, names=("r",)))
    assert replica.status == "already_published"
    inside = publish(engine, req(datasource, {"views:0": 0}, {"views:0": 20}, topic=SEVERAL_TOPICS, names=("o",)))
    assert inside.status == "fatal" and "partition views:0" in inside.message
    new_topic = publish(engine, req(datasource, {"orders:0": 3}, {"orders:0": 8}, topic=SEVERAL_TOPICS))
    assert new_topic.status == "fatal" and "partition orders:0: no committed offset" in new_topic.message
    assert committed_offsets(engine, datasource) == found and all_segment_rows(engine, datasource) == []


@pytest.mark.parametrize(("first", "then"), [("events", SEVERAL_TOPICS), (SEVERAL_TOPICS, "events")])
def test_offsets_of_one_topic_and_of_several_never_mix(engine: sa.Engine, datasource: str, first: str,
                                                      then: str) -> None:
    """Partition 0 of ``events`` is not ``events:0`` of a pattern: switching needs a reset."""
    one, other = ({0: 0}, {"events:0": 0}) if first == "events" else ({"events:0": 0}, {0: 0})
    assert publish(engine, req(datasource, one, {k: 10 for k in one}, initial=one, topic=first)).ok
    later = {k: 10 for k in other}
    outcome = publish(engine, req(datasource, later, {k: 20 for k in other}, initial=later, topic=then, names=("x",)))
    assert outcome.status == "fatal" and f"expected topic {then!r}, found {first!r}" in outcome.message
    found = committed_offsets(engine, datasource)
    assert found is not None and found.topic == first and found.offsets == Offsets({k: 10 for k in one})
    assert all_segment_rows(engine, datasource) == []


def test_every_outcome_is_logged_with_datasource_task_and_offsets(
        engine: sa.Engine, datasource: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="segment_store.publish"):
        publish(engine, req(datasource, {0: 0}, {0: 10}, initial={0: 0}, task="t-ok"))
        publish(engine, req(datasource, {0: 0}, {0: 10}, initial={0: 0}, task="t-replica"))
        publish(engine, req(datasource, {0: 10}, {0: 20}, topic="other", task="t-fatal"))
    ok, replica, fatal = (r for r in caplog.records if datasource in r.getMessage())
    assert "publish ok" in ok.getMessage() and "task=t-ok" in ok.getMessage()
    assert "start={'0': 0} end={'0': 10}" in ok.getMessage()
    assert "publish already_published" in replica.getMessage() and "task=t-replica" in replica.getMessage()
    assert "publish fatal" in fatal.getMessage() and "committed={'0': 10}" in fatal.getMessage()
    assert [r.levelno for r in (ok, replica, fatal)] == [logging.INFO, logging.INFO, logging.WARNING]


def test_unreachable_database_raises(datasource: str) -> None:
    """Infrastructure faults are exceptions, not outcomes."""
    dead = sa.create_engine(f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/postgres",
                            connect_args={"connect_timeout": 2})
    with pytest.raises(sa.exc.OperationalError):
        publish(dead, req(datasource, {0: 0}, {0: 10}, initial={0: 0}))
    dead.dispose()


def test_request_validation() -> None:
    with pytest.raises(ValueError, match="same partitions"):
        req("ds", {0: 0, 1: 0}, {0: 5})
    with pytest.raises(ValueError, match="expected end >= start 5, found 4"):
        req("ds", {0: 5}, {0: 4})
    with pytest.raises(ValueError, match="belongs to datasource"):
        req("ds", {0: 0}, {0: 1}, segments=(seg("other", "a"),))


# --- segment rows ----------------------------------------------------------------------------

def test_segments_get_version_1_and_consecutive_partition_numbers(engine: sa.Engine, datasource: str) -> None:
    later = HOUR + timedelta(hours=1)
    first = (seg(datasource, "a", columns=["x"]), seg(datasource, "b"), seg(datasource, "c"))
    assert publish(engine, req(datasource, {0: 0}, {0: 10}, initial={0: 0}, segments=first, task="t1")).ok
    second = (seg(datasource, "d"), seg(datasource, "e", start=later))
    assert publish(engine, req(datasource, {0: 10}, {0: 20}, segments=second, task="t2")).ok
    assert all_segment_rows(engine, datasource) == [
        ("a", 1, 0, True), ("b", 1, 1, True), ("c", 1, 2, True), ("d", 1, 3, True), ("e", 1, 0, True)]
    records = used_segments(engine, datasource)
    a = records[0]
    assert (a.interval_start, a.interval_end, a.path, a.size_bytes, a.num_rows) == (
        HOUR, later, f"/deep/{datasource}/a.parquet", 100, 10)
    assert a.interval_start.tzinfo is not None and a.created_at.tzinfo is not None
    assert a.descriptor["columns"] == ["x"]
    assert a.descriptor["published_by"] == {"task_id": "t1", "topic": TOPIC, "start_offsets": {"0": 0},
                                            "end_offsets": {"0": 10}}


def test_segments_append_at_the_interval_current_version(engine: sa.Engine, datasource: str) -> None:
    assert publish(engine, req(datasource, {0: 0}, {0: 10}, initial={0: 0}, names=("a",))).ok
    with engine.begin() as conn:  # what a compaction swap leaves behind: version 2 used, version 1 unused
        conn.execute(segments_t.update().where(segments_t.c.datasource == datasource).values(used=False))
        conn.execute(segments_t.insert().values(
            id=f"{datasource}/compacted", datasource=datasource, interval_start=HOUR,
            interval_end=HOUR + timedelta(hours=1), version=2, partition_num=0, path="/deep/c.parquet",
            size_bytes=1, num_rows=1, used=True))
    assert publish(engine, req(datasource, {0: 10}, {0: 20}, names=("b",))).ok
    assert all_segment_rows(engine, datasource) == [
        ("a", 1, 0, False), ("compacted", 2, 0, True), ("b", 2, 1, True)]


def test_republishing_an_existing_segment_id_is_fatal_not_an_exception(
        engine: sa.Engine, datasource: str) -> None:
    """After a full reset the same range yields the same deterministic ids: the unique key refuses them."""
    segments = (seg(datasource, "same-id"),)
    assert publish(engine, req(datasource, {0: 0}, {0: 10}, initial={0: 0}, segments=segments)).ok
    reset_offsets(engine, datasource, None)
    outcome = publish(engine, req(datasource, {0: 0}, {0: 10}, initial={0: 0}, segments=segments, epoch=1))
    assert outcome.status == "fatal"
    assert f"{datasource}/same-id" in outcome.message and "already" in outcome.message
    stored = committed_offsets(engine, datasource)
    assert stored is not None and dict(stored.offsets) == {}  # the offsets write was rolled back with it
    assert all_segment_rows(engine, datasource) == [("same-id", 1, 0, True)]


# --- compare-and-swap and resets ---------------------------------------------------------------

def test_reset_between_upsert_and_lock_fails_the_stale_task(
        engine: sa.Engine, datasource: str, hooked_engine: Callable[..., sa.Engine]) -> None:
    assert publish(engine, req(datasource, {0: 0}, {0: 10}, initial={0: 0})).ok
    fired: list[bool] = []

    def reset_first(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if "FOR UPDATE" in statement and not fired:
            fired.append(True)
            reset_offsets(engine, datasource, None)  # another connection, between upsert and lock

    outcome = publish(hooked_engine("before_cursor_execute", reset_first), req(datasource, {0: 10}, {0: 20}))
    assert fired and outcome.status == "fatal" and "expected offsets epoch 0, found 1" in outcome.message
    stored = committed_offsets(engine, datasource)
    assert stored is not None and dict(stored.offsets) == {} and stored.version == 2


def test_reset_waits_for_in_flight_publish_and_then_wins(
        engine: sa.Engine, datasource: str, hooked_engine: Callable[..., sa.Engine]) -> None:
    assert publish(engine, req(datasource, {0: 0}, {0: 10}, initial={0: 0})).ok
    locked, release = threading.Event(), threading.Event()

    def hold(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if "FOR UPDATE" in statement:
            locked.set()
            assert release.wait(10)

    eng = hooked_engine("after_cursor_execute", hold)
    with ThreadPoolExecutor(2) as pool:
        in_flight = pool.submit(publish, eng, req(datasource, {0: 10}, {0: 20}, names=("a",)))
        assert locked.wait(10)
        resetting = pool.submit(reset_offsets, engine, datasource, {0: 5})
        wait_for_lock_waiter(engine)  # the reset is blocked on the row lock held by the publish
        assert not resetting.done()
        assert stored_offsets(engine, datasource) == {0: 10}
        release.set()
        assert in_flight.result(10).ok
        resetting.result(10)
    found = committed_offsets(engine, datasource)
    assert found is not None and dict(found.offsets) == {0: 5} and (found.version, found.epoch) == (3, 1)
    assert publish(engine, req(datasource, {0: 20}, {0: 30})).status == "fatal"  # successor of the old plan
    assert publish(engine, req(datasource, {0: 5}, {0: 8})).status == "fatal"  # even where offsets match
    assert publish(engine, req(datasource, {0: 5}, {0: 8}, epoch=1)).ok
    assert stored_offsets(engine, datasource) == {0: 8}


def test_reset_then_publish_from_initial_offsets(engine: sa.Engine, datasource: str) -> None:
    assert publish(engine, req(datasource, {0: 0}, {0: 10}, initial={0: 0}, names=("a",))).ok
    reset_offsets(engine, datasource, None)
    stored = committed_offsets(engine, datasource)
    assert stored is not None and dict(stored.offsets) == {} and stored.version == 2
    stale = publish(engine, req(datasource, {0: 50}, {0: 60}, initial={0: 50}))
    assert stale.status == "fatal" and "expected offsets epoch 0, found 1" in stale.message
    wrong = publish(engine, req(datasource, {0: 10}, {0: 20}, initial={0: 50}, epoch=1))
    assert wrong.status == "fatal" and "expected start 50 (initial offset), found 10" in wrong.message
    assert publish(engine, req(datasource, {0: 50}, {0: 60}, initial={0: 50}, names=("b",), epoch=1)).ok
    assert stored_offsets(engine, datasource) == {0: 60}
    assert used_names(engine, datasource) == [("a", 1, 0), ("b", 1, 1)]


def test_reset_offsets_overwrites_given_partitions_and_bumps_version(
        engine: sa.Engine, datasource: str) -> None:
    reset_offsets(engine, datasource, {0: 3})  # no row yet: created without a topic
    found = committed_offsets(engine, datasource)
    assert found is not None and found.topic is None and dict(found.offsets) == {0: 3} and found.version == 1
    assert publish(engine, req(datasource, {0: 3, 1: 0}, {0: 6, 1: 4}, initial={1: 0}, epoch=1)).ok
    reset_offsets(engine, datasource, {1: 1})
    found = committed_offsets(engine, datasource)
    assert found is not None and (found.topic, dict(found.offsets), found.version) == (TOPIC, {0: 6, 1: 1}, 3)


def test_pinning_adds_only_missing_partitions_names_the_topic_and_keeps_the_epoch(
        engine: sa.Engine, datasource: str) -> None:
    reset_offsets(engine, datasource, None)
    pinned = pin_offsets(engine, datasource, TOPIC, {0: 4})
    assert (pinned.topic, dict(pinned.offsets), pinned.epoch) == (TOPIC, {0: 4}, 1)
    assert publish(engine, req(datasource, {0: 4}, {0: 9}, epoch=1)).ok  # in flight across the next pin
    pinned = pin_offsets(engine, datasource, "other", {0: 0, 1: 2})
    assert (pinned.topic, dict(pinned.offsets), pinned.epoch) == (TOPIC, {0: 9, 1: 2}, 1)


# --- races between connections ----------------------------------------------------------------

def _slow_lock(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
    """Hold the freshly taken row lock a little, so the racing transaction really waits on it."""
    if "FOR UPDATE" in statement:
        time.sleep(0.01)


def _lock_timed_engine(hooked_engine: Callable[..., sa.Engine]) -> tuple[sa.Engine, list[float]]:
    """An engine that times every row-lock statement (> 5 ms: it blocked behind the other
    transaction), then holds the lock for 10 ms.
    """
    waits: list[float] = []
    started: dict[int, float] = {}

    def before(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if "FOR UPDATE" in statement:
            started[threading.get_ident()] = time.monotonic()

    def after(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if "FOR UPDATE" in statement:
            waits.append(time.monotonic() - started.pop(threading.get_ident()))

    eng = hooked_engine("before_cursor_execute", before)
    sa.event.listen(eng, "after_cursor_execute", after)
    sa.event.listen(eng, "after_cursor_execute", _slow_lock)
    return eng, waits


def test_two_replicas_racing_exactly_one_wins(
        engine: sa.Engine, datasource: str, hooked_engine: Callable[..., sa.Engine]) -> None:
    (eng, lock_waits), rounds = _lock_timed_engine(hooked_engine), 20
    winners: list[str] = []
    with ThreadPoolExecutor(2) as pool:
        for r in range(rounds):
            barrier = threading.Barrier(2)
            segments = (seg(datasource, f"r{r}-a"), seg(datasource, f"r{r}-b"))  # replicas: same ids

            def replica(task: str, r: int = r, segments: tuple[SegmentDescriptor, ...] = segments,
                        barrier: threading.Barrier = barrier) -> PublishOutcome:
                request = req(datasource, {0: 10 * r, 1: 10 * r}, {0: 10 * r + 10, 1: 10 * r + 10},
                              initial={0: 0, 1: 0}, segments=segments, task=task)
                barrier.wait(10)
                return publish(eng, request)

            tasks = [f"r{r}-replica{i}" for i in range(2)]
            outcomes = dict(zip(tasks, pool.map(replica, tasks), strict=True))
            assert sorted(o.status for o in outcomes.values()) == ["already_published", "ok"], outcomes
            loser = next(o for o in outcomes.values() if not o.ok)
            assert f"expected committed offset {10 * r}, found {10 * r + 10}" in loser.message
            winners.append(next(task for task, o in outcomes.items() if o.ok))
    found = committed_offsets(engine, datasource)
    assert found is not None and dict(found.offsets) == {0: 10 * rounds, 1: 10 * rounds}
    assert found.version == rounds
    records = used_segments(engine, datasource)
    assert [(name(s.id), s.version, s.partition_num) for s in records] == [
        (f"r{r}-{x}", 1, 2 * r + i) for r in range(rounds) for i, x in enumerate("ab")]
    assert [s.descriptor["published_by"]["task_id"] for s in records[::2]] == winners
    assert sum(wait > 0.005 for wait in lock_waits) >= rounds // 2, lock_waits  # the races were real


def test_eight_tasks_publishing_consecutive_ranges_out_of_order(
        engine: sa.Engine, datasource: str, hooked_engine: Callable[..., sa.Engine]) -> None:
    """Successors that finish first get retryable until their predecessor has published.

    The datasource already has committed offsets (an empty publish at the initial offsets): with
    no row at all, a successor is fatal instead (see the test below).
    """
    eng, n = hooked_engine("after_cursor_execute", _slow_lock), 8
    assert publish(engine, req(datasource, {0: 0, 1: 0}, {0: 0, 1: 0}, initial={0: 0, 1: 0})).ok
    barrier, failed = threading.Barrier(n), threading.Event()

    def task(i: int) -> list[str]:
        request = req(datasource, {0: 10 * i, 1: 5 * i}, {0: 10 * i + 10, 1: 5 * i + 5}, initial={0: 0, 1: 0},
                      segments=(seg(datasource, f"range-{i}"),), task=f"task-{i}")
        barrier.wait(10)
        statuses: list[str] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not failed.is_set():
            statuses.append(publish(eng, request).status)
            if statuses[-1] == "fatal":
                failed.set()
            if statuses[-1] != "retryable":
                return statuses
            time.sleep(0.005)
        return statuses

    with ThreadPoolExecutor(n) as pool:
        futures = {i: pool.submit(task, i) for i in reversed(range(n))}
        statuses = {i: f.result(60) for i, f in futures.items()}
    assert all(s[-1] == "ok" and "fatal" not in s for s in statuses.values()), statuses
    found = committed_offsets(engine, datasource)
    assert found is not None and dict(found.offsets) == {0: 10 * n, 1: 5 * n} and found.version == n + 1
    assert all_segment_rows(engine, datasource) == [(f"range-{i}", 1, i, True) for i in range(n)]


def test_successor_finishing_before_the_first_publish_is_fatal(engine: sa.Engine, datasource: str) -> None:
    """No committed offset yet: a start other than the initial offset is fatal, even if it is the
    end of a first task that has not published yet (that range is then planned again).
    """
    second = publish(engine, req(datasource, {0: 10}, {0: 20}, initial={0: 0}, names=("b",)))
    assert second.status == "fatal" and "expected start 0 (initial offset), found 10" in second.message
    assert publish(engine, req(datasource, {0: 0}, {0: 10}, initial={0: 0}, names=("a",))).ok
    assert stored_offsets(engine, datasource) == {0: 10}
    assert used_names(engine, datasource) == [("a", 1, 0)]


# --- bounded waits ---------------------------------------------------------------------------

def test_a_publish_blocked_by_a_stuck_lock_holder_gives_up_as_retryable(engine: sa.Engine, datasource: str) -> None:
    """A dead or paused overlord holding the datasource lock must not hang every publish forever."""
    assert publish(engine, req(datasource, {0: 0}, {0: 10}, initial={0: 0})).ok
    bounded = metadata_engine(engine.url.render_as_string(hide_password=False), lock_timeout_s=0.5)
    holder = engine.connect()
    try:
        tx = holder.begin()
        holder.exec_driver_sql("SELECT 1 FROM datasource_offsets WHERE datasource = %s FOR UPDATE", (datasource,))
        with ThreadPoolExecutor(1) as pool:
            blocked = pool.submit(publish, bounded, req(datasource, {0: 10}, {0: 20}, names=("a",)))
            try:
                outcome = blocked.result(timeout=20)  # unbounded, it waits as long as the holder lives
            finally:
                tx.rollback()
    finally:
        holder.close()
        bounded.dispose()
    assert outcome.status == "retryable" and "lock" in outcome.message
    assert stored_offsets(engine, datasource) == {0: 10} and all_segment_rows(engine, datasource) == []


def test_metadata_engine_bounds_statements_and_idle_transactions(engine: sa.Engine) -> None:
    bounded = metadata_engine(engine.url.render_as_string(hide_password=False))
    with bounded.connect() as conn:
        settings = {name: conn.exec_driver_sql(f"SHOW {name}").scalar() for name in (
            "lock_timeout", "statement_timeout", "idle_in_transaction_session_timeout")}
    bounded.dispose()
    assert settings == {"lock_timeout": "10s", "statement_timeout": "5min",
                        "idle_in_transaction_session_timeout": "1min"}


# --- leader fencing ------------------------------------------------------------------------------

def test_a_task_planned_by_a_deposed_leader_cannot_publish(engine: sa.Engine, datasource: str) -> None:
    with engine.begin() as conn:
        old_leader = claim_leadership(conn, "overlord-a")
    assert publish(engine, req(datasource, {0: 0}, {0: 0}, initial={0: 0})).ok
    with engine.begin() as conn:
        new_leader = claim_leadership(conn, "overlord-b")  # a: paused or partitioned, its task still running
    assert new_leader > old_leader
    zombie = publish(engine, replace(req(datasource, {0: 0}, {0: 10}, names=("z",)), leader_epoch=old_leader))
    assert zombie.status == "fatal" and "no longer the leader" in zombie.message
    assert stored_offsets(engine, datasource) == {0: 0} and all_segment_rows(engine, datasource) == []
    assert publish(engine, replace(req(datasource, {0: 0}, {0: 10}, names=("a",)), leader_epoch=new_leader)).ok


def test_a_leader_elected_after_a_restore_never_reuses_an_epoch_of_before(engine: sa.Engine, datasource: str) -> None:
    """The metadata store restored from a backup holds an older epoch; the next leader's epoch is still past every
    epoch claimed before (they follow PostgreSQL's clock), so a task a pre-restore leader planned cannot publish.
    """
    with engine.begin() as conn:
        backed_up = claim_leadership(conn, "overlord-a")
    with engine.begin() as conn:
        after_backup = claim_leadership(conn, "overlord-a")  # elected again after the backup was taken
        conn.execute(sa.text("UPDATE leadership SET epoch = :epoch WHERE id = 1"), {"epoch": backed_up})  # restored
    with engine.begin() as conn:
        restored_leader = claim_leadership(conn, "overlord-b")
    assert restored_leader > after_backup > backed_up
    zombie = publish(engine, replace(req(datasource, {0: 0}, {0: 10}, initial={0: 0}), leader_epoch=after_backup))
    assert zombie.status == "fatal" and "no longer the leader" in zombie.message


def test_skipping_lost_records_never_moves_offsets_back_or_acts_for_a_deposed_leader(
        engine: sa.Engine, datasource: str) -> None:
    with engine.begin() as conn:
        old_leader = claim_leadership(conn, "overlord-a")
    assert publish(engine, req(datasource, {0: 0}, {0: 10}, initial={0: 0})).ok
    # leader a saw records [10, 25) deleted by retention; before it skips them, b took over and published
    with engine.begin() as conn:
        new_leader = claim_leadership(conn, "overlord-b")
    assert skip_offsets(engine, datasource, {0: (10, 25)}, old_leader) is None
    assert stored_offsets(engine, datasource) == {0: 10}
    moved = skip_offsets(engine, datasource, {0: (10, 25)}, new_leader)
    assert moved is not None and dict(moved.offsets) == {0: 25}
    assert publish(engine, req(datasource, {0: 25}, {0: 40}, epoch=moved.epoch)).ok
    # a supervisor that read offset 10 before those publishes must not move the partition back to 25
    assert skip_offsets(engine, datasource, {0: (10, 25)}, new_leader) is None  # before: offsets went 40 -> 25
    assert stored_offsets(engine, datasource) == {0: 40}


# --- segment files checked under the lock --------------------------------------------------------------

@pytest.mark.parametrize("deep_storage", ["local", "s3"], indirect=True)
def test_the_files_of_a_large_publish_are_checked_within_an_idle_transactions_bound(
        engine: sa.Engine, datasource: str, deep_storage: str) -> None:
    """Checked one request per file under the datasource's lock, 1,000 files on S3 kept the transaction idle
    longer than the metadata engine allows (here 4 s; 1 min in production): on moto 12 ms a HEAD, 12 s in
    all, and the publish failed at every retry, stalling the partition. One listing per directory of the
    task's files (here 4, under 1 s) keeps it short.
    """
    from segment_store import DeepStorage
    from segment_store.descriptors import SegmentDescriptor

    storage = DeepStorage(deep_storage)
    paths = [storage.path_for(datasource, HOUR + timedelta(hours=h), HOUR + timedelta(hours=h + 1), "attempt-1", n)
             for h in range(4) for n in range(250)]
    for path in {p.rsplit("/", 1)[0] for p in paths}:
        storage.makedirs_for(path + "/x")
    storage.fs.pipe({path: b"PAR1" for path in paths})
    segments = tuple(SegmentDescriptor(id=f"{datasource}/{i}", datasource=datasource, interval_start=HOUR,
                                       interval_end=HOUR + timedelta(hours=1), path=path, size_bytes=4, num_rows=1)
                     for i, path in enumerate(paths))
    bounded = metadata_engine(engine.url.render_as_string(hide_password=False), idle_in_transaction_timeout_s=4.0)
    try:
        first = publish(bounded, req(datasource, {0: 0}, {0: 10}, initial={0: 0}, segments=segments[:999]), storage)
        assert first.ok, first.message
        storage.fs.rm(paths[999])  # swept by cleanup before the publish took the lock
        second = publish(bounded, req(datasource, {0: 10}, {0: 20}, segments=segments[999:]), storage)
        assert second.status == "fatal" and "segment files missing" in second.message and paths[999] in second.message
    finally:
        bounded.dispose()


# --- several datasources in one transaction (group commit) ----------------------------------------

def _count_statements(hooked_engine: Callable[..., sa.Engine], statements: list[str]) -> sa.Engine:
    return hooked_engine("before_cursor_execute", lambda _c, _cur, statement, *_: statements.append(statement))


def test_publishes_of_several_datasources_together_are_each_their_own_guarded_commit(
        engine: sa.Engine, hooked_engine: Callable[..., sa.Engine]) -> None:
    ok, behind, reset, new = (f"ds-{uuid.uuid4().hex[:8]}" for _ in range(4))
    for ds in (ok, behind, reset):
        assert publish(engine, req(ds, {0: 0}, {0: 10}, initial={0: 0})).ok
    reset_offsets(engine, reset, {0: 10})  # epoch 1: a task planned under epoch 0 is refused
    statements: list[str] = []
    outcomes = publish_many(_count_statements(hooked_engine, statements), [
        (req(ok, {0: 10}, {0: 20}, names=("a", "b")), None),
        (req(behind, {0: 20}, {0: 30}, names=("a",)), None),
        (req(reset, {0: 10}, {0: 20}, names=("a",)), None),
        (req(new, {0: 0}, {0: 5}, initial={0: 0}, names=("a",)), None)])
    assert [o.status for o in outcomes] == ["ok", "retryable", "fatal", "ok"]
    assert "expected offsets epoch 0, found 1" in outcomes[2].message
    assert sum("FOR UPDATE" in s for s in statements) == 1  # one lock statement for all four
    assert sum("INSERT INTO SEGMENTS" in s.upper() for s in statements) == 1  # one write statement for all four
    assert stored_offsets(engine, ok) == {0: 20} and used_names(engine, ok) == [("a", 1, 0), ("b", 1, 1)]
    assert stored_offsets(engine, behind) == {0: 10} and used_names(engine, behind) == []
    assert stored_offsets(engine, reset) == {0: 10} and used_names(engine, reset) == []
    assert stored_offsets(engine, new) == {0: 5} and used_names(engine, new) == [("a", 1, 0)]
    row = outcomes[0].row
    assert row is not None and row == committed_offsets(engine, ok)  # what the supervisor plans against next


def test_a_datasource_another_writer_holds_never_holds_the_others_publish_back(engine: sa.Engine) -> None:
    held, free = (f"ds-{uuid.uuid4().hex[:8]}" for _ in range(2))
    for ds in (held, free):
        assert publish(engine, req(ds, {0: 0}, {0: 10}, initial={0: 0})).ok
    with engine.connect() as holder, ThreadPoolExecutor(1) as pool:
        tx = holder.begin()
        holder.exec_driver_sql("SELECT 1 FROM datasource_offsets WHERE datasource = %s FOR UPDATE", (held,))
        together = pool.submit(publish_many, engine, [(req(held, {0: 10}, {0: 20}, names=("a",)), None),
                                                      (req(free, {0: 10}, {0: 20}, names=("a",)), None)])
        deadline = time.monotonic() + 20
        while stored_offsets(engine, free) != {0: 20} and time.monotonic() < deadline:
            time.sleep(0.01)
        assert stored_offsets(engine, free) == {0: 20}  # committed while the other datasource is still held
        wait_for_lock_waiter(engine)  # and the held one waits for its lock, alone
        assert not together.done() and stored_offsets(engine, held) == {0: 10}
        tx.rollback()
        assert [o.status for o in together.result(20)] == ["ok", "ok"]
    assert stored_offsets(engine, held) == {0: 20}


def test_replicas_published_together_exactly_one_wins(engine: sa.Engine, datasource: str) -> None:
    segments = (seg(datasource, "same"),)
    outcomes = publish_many(engine, [(req(datasource, {0: 0}, {0: 10}, initial={0: 0}, segments=segments), None),
                                     (req(datasource, {0: 0}, {0: 10}, initial={0: 0}, segments=segments), None)])
    assert [o.status for o in outcomes] == ["ok", "already_published"]
    assert stored_offsets(engine, datasource) == {0: 10} and used_names(engine, datasource) == [("same", 1, 0)]


def test_a_duplicate_segment_id_in_a_batch_fails_only_its_own_request(engine: sa.Engine) -> None:
    dup, other = (f"ds-{uuid.uuid4().hex[:8]}" for _ in range(2))
    assert publish(engine, req(dup, {0: 0}, {0: 10}, initial={0: 0}, names=("x",))).ok
    outcomes = publish_many(engine, [(req(dup, {0: 10}, {0: 20}, names=("x",)), None),
                                     (req(other, {0: 0}, {0: 10}, initial={0: 0}, names=("y",)), None)])
    assert [o.status for o in outcomes] == ["fatal", "ok"] and "already published" in outcomes[0].message
    assert stored_offsets(engine, dup) == {0: 10} and stored_offsets(engine, other) == {0: 10}
    assert used_names(engine, other) == [("y", 1, 0)]


def test_a_topic_re_created_since_its_offsets_were_committed_refuses_the_publish(
        engine: sa.Engine, datasource: str) -> None:
    """The broker's topic IDs after the read are checked under the lock; an ID seen first is recorded."""
    assert publish(engine, req(datasource, {0: 0}, {0: 10}, initial={0: 0})).ok
    assert check_topic_ids(engine, datasource, {0: "id-a"}) == {}
    changed = publish(engine, replace(req(datasource, {0: 10}, {0: 20}, names=("a",)), topic_ids={0: "id-b"}))
    assert changed.status == "fatal" and "re-created" in changed.message and "id-a -> id-b" in changed.message
    assert stored_offsets(engine, datasource) == {0: 10} and used_names(engine, datasource) == []
    same = publish(engine, replace(req(datasource, {0: 10, 1: 0}, {0: 20, 1: 5}, initial={1: 0}, names=("a",)),
                                   topic_ids={0: "id-a", 1: "id-a"}))
    assert same.ok and stored_offsets(engine, datasource) == {0: 20, 1: 5}
    assert check_topic_ids(engine, datasource, {1: "id-c"}) == {1: ("id-a", "id-c")}  # recorded by the publish
