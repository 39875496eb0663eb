"""Cleanup and publish interleaved on real PostgreSQL and real files: a published row never
points at a file cleanup deleted.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from segment_store import (
    DeepStorage,
    PublishRequest,
    SegmentDescriptor,
    cleanup,
    committed_offsets,
    publish,
    used_segments,
)
from tests.helpers import paused_at_lock, wait_for_lock_waiter

HOUR = datetime(2025, 1, 1, 10, tzinfo=UTC)


def written_file(storage: DeepStorage, datasource: str, attempt: str) -> SegmentDescriptor:
    """A task's segment file in the deep storage layout, written an hour ago (past a zero grace)."""
    path = storage.path_for(datasource, HOUR, HOUR + timedelta(hours=1), attempt, 0)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(b"PAR1 not really parquet PAR1")
    an_hour_ago = time.time() - 3600
    os.utime(path, (an_hour_ago, an_hour_ago))
    return SegmentDescriptor(id=f"{datasource}_{attempt}", datasource=datasource, interval_start=HOUR,
                             interval_end=HOUR + timedelta(hours=1), path=path, size_bytes=28, num_rows=1)


def request(datasource: str, segment: SegmentDescriptor) -> PublishRequest:
    return PublishRequest(datasource=datasource, topic="events", task_id=segment.id, start_offsets={0: 0},
                          end_offsets={0: 10}, initial_offsets={0: 0}, segments=(segment,))


@pytest.fixture()
def storage(tmp_path: Path) -> DeepStorage:
    return DeepStorage(str(tmp_path / "deep"))


@pytest.fixture()
def paused_publish_engine(engine: sa.Engine) -> Iterator[tuple[sa.Engine, threading.Event, threading.Event]]:
    """An engine whose publish pauses right after it has taken the datasource lock."""
    with paused_at_lock(engine) as paused:
        yield paused


def test_a_publish_whose_files_cleanup_deleted_publishes_nothing(engine, storage, datasource):
    segment = written_file(storage, datasource, "task-a")
    report = cleanup(engine, storage, datasource, orphan_grace=timedelta(0))
    assert report.orphan_files == (segment.path,)
    outcome = publish(engine, request(datasource, segment), storage)
    assert outcome.status == "fatal" and "missing" in outcome.message and segment.path in outcome.message
    assert used_segments(engine, datasource) == []
    stored = committed_offsets(engine, datasource)
    assert stored is None or dict(stored.offsets) == {}


def test_cleanup_waits_for_a_publish_in_flight_and_keeps_its_files(
        engine, storage, datasource, paused_publish_engine):
    paused, locked, release = paused_publish_engine
    segment = written_file(storage, datasource, "task-b")
    with ThreadPoolExecutor(2) as pool:
        publishing = pool.submit(publish, paused, request(datasource, segment), storage)
        assert locked.wait(10)  # the publish holds the datasource lock, its row not yet committed
        sweeping = pool.submit(cleanup, engine, storage, datasource, orphan_grace=timedelta(0))
        wait_for_lock_waiter(engine)  # the sweep waits for the publish's lock ...
        assert not sweeping.done() and Path(segment.path).exists()  # ... before, it deleted the file here
        release.set()
        assert publishing.result(20).ok
        assert sweeping.result(20).orphan_files == ()
    assert Path(segment.path).exists()
    assert [s.path for s in used_segments(engine, datasource)] == [segment.path]
