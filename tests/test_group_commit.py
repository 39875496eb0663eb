"""Group commit against real PostgreSQL: tasks that finish while a publish runs go together in the next one."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import sqlalchemy as sa

from indexing_task.group_commit import GroupCommit
from segment_store import committed_offsets
from tests.helpers import paused_at_lock
from tests.test_publish import req, used_names


@pytest.fixture()
def held_engine(engine: sa.Engine) -> Iterator[tuple[sa.Engine, threading.Event, threading.Event]]:
    """An engine whose first publish pauses once it holds its lock (``locked``) until ``release``."""
    with paused_at_lock(engine) as held:
        yield held


def test_tasks_finishing_during_a_publish_go_together_in_the_next(held_engine) -> None:
    eng, locked, release = held_engine
    names = [f"ds-{uuid.uuid4().hex[:8]}" for _ in range(6)]
    commit = GroupCommit(eng)
    try:
        with ThreadPoolExecutor(len(names)) as pool:
            first = pool.submit(commit.publish, req(names[0], {0: 0}, {0: 10}, initial={0: 0}, names=("a",)))
            assert locked.wait(20)  # the first transaction holds its lock; the others queue meanwhile
            rest = [pool.submit(commit.publish, req(ds, {0: 0}, {0: 10}, initial={0: 0}, names=("a",)))
                    for ds in names[1:]]
            while len(commit._waiting) < len(rest):
                threading.Event().wait(0.01)
            release.set()
            outcomes = [first.result(20)] + [f.result(20) for f in rest]
    finally:
        commit.close()
    assert [o.status for o in outcomes] == ["ok"] * len(names)
    assert (commit.transactions, commit.published) == (2, len(names))
    for ds in names:
        found = committed_offsets(eng, ds)
        assert found is not None and dict(found.offsets) == {0: 10} and used_names(eng, ds) == [("a", 1, 0)]


def test_a_database_fault_raises_in_the_publishing_task_and_a_closed_commit_refuses(engine: sa.Engine) -> None:
    broken = sa.create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none", pool_pre_ping=False)
    commit = GroupCommit(broken)
    try:
        with pytest.raises(sa.exc.OperationalError):
            commit.publish(req(f"ds-{uuid.uuid4().hex[:8]}", {0: 0}, {0: 10}, initial={0: 0}))
    finally:
        commit.close()
        broken.dispose()
    commit = GroupCommit(engine)
    try:
        assert commit.publish(req(f"ds-{uuid.uuid4().hex[:8]}", {0: 0}, {0: 10}, initial={0: 0})).ok
    finally:
        commit.close()
    with pytest.raises(RuntimeError, match="shut down"):
        commit.publish(req("x", {0: 0}, {0: 10}, initial={0: 0}))
