"""The overlord on a real Spark standalone cluster (a master and two workers from pyspark's
``spark-class``, on loopback) with segments on S3 (moto): a killed overlord's cluster application
stopped, then supervisors, SQL, compaction and cleanup with exact results; a deposed leader's task
fenced at publish.

Overlords run as child processes, as deployed: a process has one SparkContext, and the test
session's is local.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import s3fs
import sqlalchemy as sa

from overlord.dev.sample_data import make_sample_events, produce
from overlord.dev.spark_cluster import SparkCluster, spark_cluster
from overlord.dev.stack import DevStack
from overlord.supervisor.metadata_store import tasks as tasks_t
from segment_store import used_segments
from tests.helpers import (
    OverlordProcess,
    assert_exact,
    committed_total,
    merged,
    overlord_cli,
    published_table,
    spec_json,
    wait_until,
)
from tests.test_leadership import kill_lock_session

pytestmark = pytest.mark.long  # a standalone Spark cluster and overlords killed on it

API = "/druid/indexer/v1"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    with spark_cluster(tmp_path_factory.mktemp("spark-cluster"), workers=2, cores=1, memory="1g") as running:
        yield running


@pytest.fixture()
def overlords(stack: DevStack, cluster: SparkCluster, s3_endpoint: str, tmp_path: Path
              ) -> Iterator[Callable[..., OverlordProcess]]:
    """``overlords(*faults, **spark_conf)``: an overlord process on the cluster and a fresh S3 bucket."""
    bucket = f"deep-{uuid.uuid4().hex[:12]}"
    s3fs.S3FileSystem(skip_instance_cache=True).mkdir(bucket)
    started: list[OverlordProcess] = []

    def start(*faults: str, **spark_conf: str) -> OverlordProcess:
        env = stack.as_env() | {
            "OVERLORD_SPARK_MASTER": cluster.master_url, "OVERLORD_DEEP_STORAGE": f"s3://{bucket}/deep",
            "OVERLORD_SPARK_CONF": json.dumps({"spark.driver.host": "127.0.0.1", **spark_conf}),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "OVERLORD_ICEBERG_PERIOD_S": "0"}  # cleanup below deletes every replaced file: no snapshot keeps one
        started.append(OverlordProcess(env, tmp_path / f"overlord-{len(started)}.log", *faults, ready_s=180))
        return started[-1]

    yield start
    for server in started:
        if server.process.poll() is None:
            server.kill()


def _sql(server: OverlordProcess, sql: str) -> list[dict[str, object]]:
    answer = httpx.post(f"{server.url}/druid/v2/sql", json={"query": sql}, timeout=120)
    assert answer.status_code == 200, answer.text
    rows: list[dict[str, object]] = answer.json()
    return rows


def _by_country(server: OverlordProcess, datasource: str) -> dict[str, tuple[int, int]]:
    rows = _sql(server, f'SELECT country, SUM("count") AS n, SUM(value_sum) AS v FROM "{datasource}" GROUP BY 1')
    return {str(r["country"]): (int(r["n"]), int(r["v"])) for r in rows}  # type: ignore[call-overload]


def _app_of(cluster: SparkCluster, state: str) -> list[dict[str, object]]:
    return [app for app in cluster.state()[state] if app.get("name") == "overlord-indexer"]


def _deep_storage(engine: sa.Engine, datasource: str) -> str:
    """The segment root a datasource's files were published under (``s3://bucket/deep``)."""
    path = used_segments(engine, datasource)[0].path
    return path[:path.index(f"/{datasource}/")]


def test_a_deposed_leaders_task_cannot_publish_after_the_new_leader_took_over(
        stack, engine, overlords, make_topic, datasource, tmp_path):
    """The zombie writes its files, is deposed without noticing, and tries to publish after its
    successor has published the same range: the publish transaction refuses it on the leader epoch.
    """
    topic = make_topic(2)
    sample = make_sample_events(6_000, seed=41)
    produce(stack.bootstrap_servers, topic, sample.records, 2)
    hold = tmp_path / "hold"
    hold.mkdir()
    one_core = {"spark.cores.max": "1", "spark.executor.memory": "768m"}  # both overlords fit on the cluster
    zombie = overlords("--hold-before-publish", str(hold), "--deaf-leader", **one_core)
    answer = httpx.post(f"{zombie.url}{API}/supervisor", json=spec_json(datasource, topic), timeout=30)
    assert answer.status_code == 200, answer.text
    wait_until(lambda: any(hold.glob("held-*")), "the zombie's task to write its files", 240)
    [held] = [p.name.removeprefix("held-") for p in hold.glob("held-*")]

    # The zombie's leader session ends (a deaf leader renews no lease: its session may be gone already);
    # it does not notice.
    kill_lock_session(engine, held=False)
    successor = overlords(**one_core)
    wait_until(lambda: httpx.get(f"{successor.url}{API}/isLeader", timeout=5).status_code == 200,
               "the successor to lead", 60)
    wait_until(lambda: committed_total(engine, datasource) == len(sample.records), "the successor publishes", 240)
    (hold / "release").touch()

    def zombie_outcome() -> str | None:
        with engine.connect() as conn:
            return conn.execute(sa.select(tasks_t.c.status_detail).where(tasks_t.c.id == held)).scalar()

    wait_until(lambda: "leader epoch" in (zombie_outcome() or ""), "the zombie's publish to be refused", 120)
    assert "no longer the leader" in str(zombie_outcome())
    assert committed_total(engine, datasource) == len(sample.records)
    assert not any(f"/{held}/" in s.path for s in used_segments(engine, datasource))
    assert_exact(published_table(engine, datasource), sample)


def test_a_killed_overlords_application_is_stopped_and_its_successor_ingests_queries_compacts_and_cleans_up(
        stack, engine, cluster, overlords, make_topic, datasource):
    """One overlord is SIGKILLed mid-task: the master ends its application and nothing is published. Its
    successor reads the range again, then ingests more, answers SQL, compacts and cleans up S3, exactly.
    """
    topic = make_topic(2)
    first, second = make_sample_events(40_000, seed=51), make_sample_events(10_000, seed=52)
    produce(stack.bootstrap_servers, topic, first.records, 2)
    doomed = overlords()
    [app] = _app_of(cluster, "activeapps")
    answer = httpx.post(f"{doomed.url}{API}/supervisor", json=spec_json(datasource, topic), timeout=30)
    assert answer.status_code == 200, answer.text
    wait_until(lambda: httpx.get(f"{doomed.url}{API}/tasks?state=running", timeout=5).json() != [],
               "a task running on the cluster", 120)

    doomed.kill()

    wait_until(lambda: not _app_of(cluster, "activeapps"), "the master to end the dead driver's application", 60)
    assert app["id"] in {a["id"] for a in _app_of(cluster, "completedapps")}
    assert committed_total(engine, datasource) in (-1, 0)  # the first task never published
    server = overlords()
    [successor] = _app_of(cluster, "activeapps")
    assert successor["cores"] == 2  # one executor on each worker: every Spark job below runs there
    wait_until(lambda: committed_total(engine, datasource) == len(first.records), "the restart publishes", 240)
    assert_exact(published_table(engine, datasource), first)
    produce(stack.bootstrap_servers, topic, second.records, 2)
    total = len(first.records) + len(second.records)
    wait_until(lambda: committed_total(engine, datasource) == total, "everything published", 240)
    expected = merged(first, second)
    exact = {c: (n, expected.value_by_country[c]) for c, n in expected.count_by_country.items()}
    assert _by_country(server, datasource) == exact
    before = used_segments(engine, datasource)

    compacted = httpx.post(f"{server.url}{API}/compact/{datasource}", json={}, timeout=300)

    assert compacted.status_code == 200, compacted.text
    intervals = compacted.json()["intervals"]
    assert intervals and all(i["status"] == "ok" for i in intervals), intervals
    after = used_segments(engine, datasource)
    assert len(after) < len(before) and _by_country(server, datasource) == exact

    cleaned = overlord_cli("cleanup", "--retention", "PT0S", "--orphan-grace", "PT0S",
                           env=stack.as_env() | {"OVERLORD_DEEP_STORAGE": _deep_storage(engine, datasource)})

    assert cleaned.returncode == 0, cleaned.stderr
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    assert {f"s3://{key}" for key in fs.find(_deep_storage(engine, datasource))} == {s.path for s in after}
    assert _by_country(server, datasource) == exact
    assert_exact(published_table(engine, datasource), expected)
    assert server.terminate() == 0


def test_a_master_whose_ui_answers_before_it_has_a_state_counts_no_workers(tmp_path: Path) -> None:
    """The master's web UI can answer an empty body while it starts: the cluster fixture failed with a
    JSONDecodeError instead of waiting for the workers.
    """
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Starting(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Starting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cluster = SparkCluster(tmp_path)
        cluster.ui_port = server.server_address[1]
        assert cluster._alive_workers() == 0
    finally:
        server.shutdown()
