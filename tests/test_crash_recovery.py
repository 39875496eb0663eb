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

pytestmark = pytest.mark.long  # SIGKILLs the overlord at three moments, restarting each time


@pytest.fixture()
def servers(stack: DevStack, tmp_path: Path) -> Iterator[Callable[..., OverlordProcess]]:
    started: list[OverlordProcess] = []

    def start(pause_before_publish_s: float = 0) -> OverlordProcess:
        faults = ("--pause-before-publish", str(pause_before_publish_s)) if pause_before_publish_s else ()
        server = OverlordProcess(stack.as_env() | {"OVERLORD_DEEP_STORAGE": str(tmp_path / "deep"),
                                                   "OVERLORD_SPARK_MASTER": "local[2]"},
                                 tmp_path / f"overlord-{len(started)}.log", *faults)
        started.append(server)
        return server

    yield start
    for server in started:
        if server.process.poll() is None:
            server.kill()


def parquet_files(root: Path) -> set[str]:
    return {str(p) for p in root.rglob("*.parquet")}


def test_sigkill_at_three_moments_then_restart_is_exact(stack, engine: sa.Engine, make_topic, datasource, servers,
                                                       tmp_path: Path):
    """SIGKILLed while a task reads; its successor SIGKILLed after its task wrote its files but before it
    published; the next one SIGKILLed right after a publish. Each restart resumes from the committed offsets,
    and what is published is exactly what was produced, with the unpublished task's files left as orphans.
    """
    topic = make_topic(2)
    samples = [make_sample_events(40_000, seed=11)]
    produce(stack.bootstrap_servers, topic, samples[0].records, 2)
    server = servers()
    response = httpx.post(f"{server.url}/druid/indexer/v1/supervisor", json=spec_json(datasource, topic),
                          timeout=30)
    assert response.status_code == 200, response.text

    wait_until(lambda: httpx.get(f"{server.url}/druid/indexer/v1/tasks?state=running",
                                 timeout=5).json() != [], "a running task")
    time.sleep(0.3)
    server.kill()  # while reading
    assert committed_total(engine, datasource) in (-1, 0)

    server = servers(pause_before_publish_s=60)
    wait_until(lambda: parquet_files(tmp_path / "deep") != set(), "segment files to be written")
    server.kill()  # files written, not published
    assert committed_total(engine, datasource) in (-1, 0), "nothing may be published yet"
    orphans = parquet_files(tmp_path / "deep")

    server = servers()
    wait_until(lambda: committed_total(engine, datasource) == len(samples[0].records), "the first publish", 180)
    assert_exact(published_table(engine, datasource), samples[0])
    samples.append(make_sample_events(5_000, seed=12))
    produce(stack.bootstrap_servers, topic, samples[1].records, 2)
    wait_until(lambda: committed_total(engine, datasource) > len(samples[0].records), "the next publish", 120)
    server.kill()  # right after a publish

    samples.append(make_sample_events(5_000, seed=13))
    produce(stack.bootstrap_servers, topic, samples[2].records, 2)
    restarted = servers()
    total = sum(len(s.records) for s in samples)
    wait_until(lambda: committed_total(engine, datasource) == total, "everything committed after restart", 180)

    assert_exact(published_table(engine, datasource), merged(*samples))
    referenced = {seg.path for seg in used_segments(engine, datasource)}
    assert orphans and not orphans & referenced, "the killed task's files stay unpublished orphans"
    tasks = httpx.get(f"{restarted.url}/druid/indexer/v1/tasks?datasource={datasource}", timeout=10).json()
    assert tasks, "the restarted overlord lists the tasks"
    assert restarted.terminate() == 0
