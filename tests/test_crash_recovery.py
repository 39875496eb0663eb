"""SIGKILL the overlord at different moments, restart it, and find exactly what was produced published."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from overlord.dev.sample_data import make_sample_events, produce
from overlord.dev.stack import DevStack
from segment_store import used_segments
from tests.helpers import OverlordProcess, assert_exact, committed_total, merged, published_table, spec_json, wait_until


@pytest.fixture()
def servers(stack: DevStack, tmp_path: Path) -> Iterator[Callable[..., OverlordProcess]]:
    started: list[OverlordProcess] = []

    def start(pause_before_publish_s: float = 0) -> OverlordProcess:
        faults = ("--pause-before-publish", str(pause_before_publish_s)) if pause_before_publish_s else ()
        server = OverlordProcess(stack.as_env() | {"OVERLORD_DEEP_STORAGE": str(tmp_path / "deep"),
                                                   "OVERLORD_SPARK_MASTER": "local[2]"},
                                 tmp_path / "overlord.log", *faults)
        started.append(server)
        return server

    yield start
    for server in started:
        if server.process.poll() is None:
            server.kill()


def parquet_files(root: Path) -> set[str]:
    return {str(p) for p in root.rglob("*.parquet")}


@pytest.mark.parametrize("moment", ["while_reading", "files_written_not_published", "right_after_publish"])
def test_sigkill_then_restart_is_exact(moment, stack, engine: sa.Engine, make_topic, datasource, servers,
                                       tmp_path: Path):
    topic = make_topic(2)
    first, second = make_sample_events(40_000, seed=11), make_sample_events(5_000, seed=12)
    produce(stack.bootstrap_servers, topic, first.records, 2)
    server = servers(60 if moment == "files_written_not_published" else 0)
    response = httpx.post(f"{server.url}/druid/indexer/v1/supervisor", json=spec_json(datasource, topic),
                          timeout=30)
    assert response.status_code == 200, response.text

    if moment == "while_reading":
        wait_until(lambda: httpx.get(f"{server.url}/druid/indexer/v1/tasks?state=running",
                                     timeout=5).json() != [], "a running task")
        time.sleep(0.3)
    elif moment == "files_written_not_published":
        wait_until(lambda: parquet_files(tmp_path / "deep") != set(), "segment files to be written")
        assert committed_total(engine, datasource) in (-1, 0), "nothing may be published yet"
    else:
        wait_until(lambda: committed_total(engine, datasource) > 0, "the first publish", 120)
    server.kill()
    published_before = committed_total(engine, datasource)

    produce(stack.bootstrap_servers, topic, second.records, 2)
    restarted = servers()
    total = len(first.records) + len(second.records)
    wait_until(lambda: committed_total(engine, datasource) == total, "everything committed after restart", 180)

    assert_exact(published_table(engine, datasource), merged(first, second))
    if moment == "files_written_not_published":
        referenced = {seg.path for seg in used_segments(engine, datasource)}
        assert published_before in (-1, 0)
        assert parquet_files(tmp_path / "deep") - referenced, "the killed task's files stay unpublished orphans"
    tasks = httpx.get(f"{restarted.url}/druid/indexer/v1/tasks?datasource={datasource}", timeout=10).json()
    assert tasks, "the restarted overlord lists the tasks"
    assert restarted.terminate() == 0
