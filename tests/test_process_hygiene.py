"""The processes an overlord starts: none imports from its working directory, none outlives it, and
``/health`` says when one of them cannot run.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import sqlalchemy as sa

from overlord.dev.sample_data import make_sample_events, produce
from overlord.dev.stack import DevStack
from tests.helpers import OverlordProcess, committed_total, spec_json, wait_until

pytestmark = pytest.mark.long  # overlord processes SIGKILLed, started from hostile directories

SHADOWED = ("specs", "overlord", "segment_store", "indexing_task")


def _working_directory_with_broken_packages(root: Path) -> Path:
    """A directory holding folders named like the project's packages, each failing on import."""
    for name in SHADOWED:
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text(
            f"raise ImportError('the working directory\\'s {name}/ was imported')\n", encoding="utf-8")
    return root


def _sql(url: str, query: str) -> httpx.Response:
    return httpx.post(f"{url}/druid/v2/sql", json={"query": query}, timeout=200)  # the first may wait for a start


def _overlord(stack: DevStack, tmp_path: Path, env: dict[str, str] | None = None, **options: Any) -> OverlordProcess:
    """``overlord serve`` on the session's stack, its deep storage under ``tmp_path``."""
    return OverlordProcess(stack.as_env() | {"OVERLORD_DEEP_STORAGE": str(tmp_path / "deep"),
                                             "OVERLORD_SPARK_MASTER": "local[2]"} | (env or {}),
                           tmp_path / "overlord.log", ready_s=180, **options)


def _index_twice_and_compact(server: OverlordProcess, stack: DevStack, engine: sa.Engine, topic: str,
                             datasource: str) -> int:
    """Two tasks' publishes (two segments per interval), then a compaction, whose merge runs in a
    low-priority pool process; the records published.
    """
    first, second = make_sample_events(1_000, seed=6), make_sample_events(1_000, seed=7)
    produce(stack.bootstrap_servers, topic, first.records, 1)
    posted = httpx.post(f"{server.url}/druid/indexer/v1/supervisor", json=spec_json(datasource, topic), timeout=30)
    assert posted.status_code == 200, posted.text
    wait_until(lambda: committed_total(engine, datasource) == 1_000, "the first task's publish", 180)
    produce(stack.bootstrap_servers, topic, second.records, 1)
    wait_until(lambda: committed_total(engine, datasource) == 2_000, "the second task's publish", 180)
    compacted = httpx.post(f"{server.url}/druid/indexer/v1/compact/{datasource}", json={}, timeout=120)
    assert compacted.status_code == 200 and compacted.json()["intervals"], compacted.text
    return 2_000


def test_the_service_imports_nothing_from_its_working_directory(stack: DevStack, engine: sa.Engine, make_topic,
                                                                datasource: str, tmp_path: Path):
    """Started (as users start it: the ``overlord`` command) from a directory holding ``specs/``,
    ``overlord/``, ``segment_store/`` and ``indexing_task/`` folders with broken modules, the query
    engine answers, the resident runners, Spark's Python workers and the compaction's merge process
    work, and nothing in the log says a module of that directory was imported.
    """
    workdir = _working_directory_with_broken_packages(tmp_path / "work")
    server = _overlord(stack, tmp_path, command=[str(Path(sys.executable).parent / "overlord")], cwd=workdir)
    try:
        answer = _sql(server.url, "SELECT 1 + 1 AS two")
        assert answer.status_code == 200, answer.text
        assert answer.json() == [{"two": 2}]
        published = _index_twice_and_compact(server, stack, engine, make_topic(1), datasource)
        counted = _sql(server.url, f'SELECT SUM("count") AS n FROM "{datasource}"')
        assert counted.status_code == 200, counted.text
        assert counted.json() == [{"n": published}]
        assert httpx.get(f"{server.url}/health", timeout=5).json()["healthy"] is True
    finally:
        server.kill()
    log = server.log.read_text(encoding="utf-8", errors="replace")
    assert "was imported" not in log
    assert "their job ended" not in log, "the resident runners crash-looped"


def _command_line(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:  # gone, or a zombie
        return ""


def test_a_sigkilled_overlord_leaves_no_process_behind(stack: DevStack, engine: sa.Engine, make_topic,
                                                       datasource: str, tmp_path: Path):
    """After a compaction (its merge runs in a low-priority pool process) and a query (the query
    engine and its JVM), SIGKILL the overlord: within seconds none of its descendants is alive.
    """
    server = _overlord(stack, tmp_path)
    try:
        _index_twice_and_compact(server, stack, engine, make_topic(1), datasource)
        assert _sql(server.url, f'SELECT COUNT(*) AS n FROM "{datasource}"').status_code == 200
        children = psutil.Process(server.process.pid).children(recursive=True)
        pool_processes = [p for p in children if "spawn_main" in _command_line(p)]
        assert pool_processes, f"the compaction's low-priority process was not started: {children}"
    except BaseException:
        server.kill()
        raise
    server.kill()
    deadline = time.monotonic() + 15
    alive = children
    while alive and time.monotonic() < deadline:
        time.sleep(0.5)
        alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"left behind: {[(p.pid, _command_line(p)[:120]) for p in alive]}"


@pytest.mark.parametrize("broken", ["query engine", "resident runners"])
def test_health_says_when_the_query_engine_or_the_runners_cannot_run(stack: DevStack, tmp_path: Path, broken: str):
    """A query engine whose JVM cannot start, or resident runners whose Python workers cannot import
    the project (a broken Python path for Spark's workers), make ``/health`` answer 503 and say which
    part; the console (behind credentials) says why.
    """
    bad_path = _working_directory_with_broken_packages(tmp_path / "bad")
    conf = ('{"spark.driver.memory": "1k"}' if broken == "query engine" else
            f'{{"spark.executorEnv.PYTHONPATH": "{bad_path}"}}')
    key = "OVERLORD_QUERY_SPARK_CONF" if broken == "query engine" else "OVERLORD_SPARK_CONF"
    expected_error = "did not start" if broken == "query engine" else "was imported"
    eager = {"OVERLORD_QUERY_ENGINE_EAGER": "true"}  # the engine starts (and fails) without a query
    server = _overlord(stack, tmp_path, {key: conf, **eager})
    try:
        field = "queryEngine" if broken == "query engine" else "residentRunners"

        def reported() -> bool:
            answer = httpx.get(f"{server.url}/health", timeout=5)
            return answer.status_code == 503 and answer.json()[field]["healthy"] is False

        wait_until(reported, f"/health to report the {broken}", 120)
        body = httpx.get(f"{server.url}/health", timeout=5).json()
        assert body["healthy"] is False and body["spark"] == {"healthy": True}
        assert body[field] == {"healthy": False}, "anyone may ask /health: it says no more than which part"
        shown = httpx.get(f"{server.url}/console/api/overview", timeout=5).json()["health"][field]
        assert shown["healthy"] is False and expected_error in shown["error"], shown
    finally:
        server.kill()
