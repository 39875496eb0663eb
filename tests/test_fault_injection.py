"""Randomized fault injection on real components, out of process: every round produces a known batch,
injects one fault at a random moment, and ends with an exact comparison, per key, of what is published
against one pass over the raw records.

Two ``overlord serve`` processes share one metadata store, a PostgreSQL of this test's own (one leads,
one stands by), and run one supervisor over a three-partition topic with ``taskCount`` 2 (a task covers
two partitions) and ``replicas`` 2, with auto-compaction every 3 s at ``skipOffsetFromLatest`` PT0S.
Faults: a task shut down mid-flight, a Spark Python worker SIGKILLed, every PostgreSQL session of
the store terminated, PostgreSQL crashed and restarted (``pg_ctl -m immediate``), the leader's
lock session killed, a cleanup with zero grace racing the tasks, a real ``resetOffsets`` to the
committed offsets racing publishes (a publish that lands in between is read again: the harness reads
those records back from the topic and expects them twice, as the operator asked), the leader's
process tree frozen (SIGSTOP) past its lease and then thawed, and an overlord SIGKILLed and
restarted. Once a third of the way in the spec is updated (a metric added); at two thirds the
topic is deleted and re-created, the supervisor stops its partitions, and the operator resets
them to the new topic's start.

After every round, every (minute, country, device) row's count, value sum, min and max and price
sum are compared with the raw records. ``FAULT_SEED`` replays a run (each run prints its seed);
``FAULT_ROUNDS`` sets the rounds (default 10: every fault once, and the topic re-created). The long mode,
``FAULT_ROUNDS=300 pytest tests/test_fault_injection.py -s``, writes ``benchmarks/results/faults.json``.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import sqlalchemy as sa
from confluent_kafka.admin import AdminClient

from overlord.dev.sample_data import create_topic, make_sample_events, produce
from overlord.dev.stack import DevStack, EmbeddedPostgres
from overlord.supervisor.leader import LEASE_S
from overlord.supervisor.metadata_store import tasks as tasks_t
from segment_store import DeepStorage, cleanup, committed_offsets
from tests.exactness import Expected, compare, published_rows, read_back
from tests.helpers import OverlordProcess, spec_json, wait_until

pytestmark = pytest.mark.long  # randomized faults against real overlord processes

ROUNDS = int(os.environ.get("FAULT_ROUNDS", "10"))
RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "faults.json"
PARTITIONS = 3
INDEXER = "/druid/indexer/v1"

def python_workers() -> list[int]:
    """Pids of Spark's Python worker processes (children of the pyspark daemons)."""
    found = subprocess.run(["pgrep", "-f", "pyspark.daemon"], capture_output=True, text=True).stdout.split()
    children = subprocess.run(["pgrep", "-P", ",".join(found)], capture_output=True,
                              text=True).stdout.split() if found else []
    return [int(p) for p in children]


def signal_tree(pid: int, sig: signal.Signals) -> None:
    root = psutil.Process(pid)
    for process in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(sig)


class Cluster:
    """Two overlord processes on one store; the harness's view of them and of the data."""

    def __init__(self, stack: DevStack, env: dict[str, str], logs: Path, store: sa.Engine, datasource: str,
                 topic: str, postgres: EmbeddedPostgres) -> None:
        self.stack, self.env, self.logs, self.store = stack, env, logs, store
        self.datasource, self.topic, self.postgres = datasource, topic, postgres
        with ThreadPoolExecutor(2) as starting:  # each waits for its Spark: start both at once
            self.servers = list(starting.map(lambda n: OverlordProcess(env, logs / f"overlord-{n}.log"), range(2)))
        self.expected = Expected()
        self.in_topic = 0
        """Records produced to the topic as it is now (a re-created topic starts again from 0)."""
        self.produced = 0

    @staticmethod
    def leads(server: OverlordProcess) -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{server.url}{INDEXER}/isLeader", timeout=3).status_code == 200
        return False  # not answering: stalled, or dead

    def leader(self) -> OverlordProcess:
        found: list[OverlordProcess] = []

        def elected() -> bool:
            found[:] = [server for server in self.servers if self.leads(server)]
            return bool(found)

        wait_until(elected, "an overlord to lead", 90)
        return found[0]

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The leader's answer; a 503 (it stopped leading, e.g. its PostgreSQL session was cut) is sent again to the
        leader then, as a client would, for up to 90 s.
        """
        deadline = time.monotonic() + 90
        while True:
            answer = httpx.request(method, f"{self.leader().url}{INDEXER}{path}", timeout=60, **kwargs)
            if answer.status_code != 503 or time.monotonic() > deadline:
                return answer
            time.sleep(0.5)

    def produce(self, records: list[bytes]) -> None:
        produce(self.stack.bootstrap_servers, self.topic, records, PARTITIONS)
        self.expected.add(records)
        self.in_topic += len(records)
        self.produced += len(records)

    def committed(self) -> int:
        stored = committed_offsets(self.store, self.datasource)
        return sum(stored.offsets.values()) if stored is not None else 0

    # --- faults ------------------------------------------------------------------------------

    def stop_task(self) -> None:
        running = self.api("GET", "/tasks", params={"state": "running"})
        for task in running.json() if running.status_code == 200 else []:  # not during a failover
            self.api("POST", f"/task/{task['id']}/shutdown")

    def kill_python_worker(self) -> None:
        workers = python_workers()
        if workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(random.choice(workers), signal.SIGKILL)

    def terminate_sessions(self) -> None:
        with self.admin() as conn:
            conn.execute(sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                 "WHERE datname = :db AND pid <> pg_backend_pid()"), {"db": self.store.url.database})

    def restart_postgres(self) -> None:
        self.postgres.restart()

    def kill_leader_session(self) -> None:
        with self.admin() as conn:
            conn.execute(sa.text(
                "SELECT pg_terminate_backend(l.pid) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
                "WHERE l.locktype = 'advisory' AND l.granted AND d.datname = :db"), {"db": self.store.url.database})

    def cleanup_now(self) -> None:
        cleanup(self.store, DeepStorage(self.env["OVERLORD_DEEP_STORAGE"]), self.datasource,
                orphan_grace=timedelta(0), retention=timedelta(0))

    def reset_racing_publish(self) -> None:
        """A real resetOffsets to the committed offsets as read now; what a publish added meanwhile is read
        again, as the operator asked: those records are expected twice.
        """
        stored = committed_offsets(self.store, self.datasource)
        if stored is None or not stored.offsets:
            return
        asked = dict(stored.offsets)
        answer = self.api("POST", f"/supervisor/{self.datasource}/resetOffsets", json={
            "type": "kafka", "partitions": {"type": "end", "stream": self.topic,
                                            "partitionOffsetMap": {str(p): o for p, o in asked.items()}}})
        if answer.status_code != 200:  # e.g. a failover meanwhile: nothing was reset
            return
        with self.store.connect() as conn:
            before = conn.execute(sa.select(tasks_t.c.start_offsets).where(
                (tasks_t.c.datasource == self.datasource) & (tasks_t.c.type == "reset_offsets"))
                .order_by(tasks_t.c.created_at.desc()).limit(1)).scalar_one()
        for partition, offset in asked.items():
            replaced = int(before.get(str(partition), offset))
            if replaced > offset:
                self.expected.add(read_back(self.stack.bootstrap_servers, self.topic, int(partition), offset,
                                            replaced))

    def freeze_leader(self) -> None:
        """Stall the leader's whole process tree past its lease: the standby must take over meanwhile."""
        leader = self.leader()
        signal_tree(leader.process.pid, signal.SIGSTOP)
        try:
            wait_until(lambda: any(self.leads(s) for s in self.servers if s is not leader),
                       "the standby to take over from the frozen leader", LEASE_S + 45)
        finally:
            signal_tree(leader.process.pid, signal.SIGCONT)

    def kill_overlord(self) -> None:
        leader = self.leader()
        leader.kill()
        self.servers[self.servers.index(leader)] = OverlordProcess(
            self.env, self.logs / f"overlord-{self.servers.index(leader)}.log")

    def admin(self) -> Any:
        return sa.create_engine(self.postgres.url, poolclass=sa.pool.NullPool).connect()

    # --- once per run ------------------------------------------------------------------------

    def update_spec(self) -> None:
        spec = spec_json(self.datasource, self.topic, taskCount=2, replicas=2)
        spec["spec"]["dataSchema"]["metricsSpec"].append({"type": "longSum", "name": "value_sum_2",
                                                         "fieldName": "value"})
        assert self.api("POST", "/supervisor", json=spec).status_code == 200

    def recreate_topic(self, records: list[bytes]) -> None:
        """Delete and re-create the topic under the running supervisor; reset its stopped partitions to 0."""
        admin = AdminClient({"bootstrap.servers": self.stack.bootstrap_servers})
        for future in admin.delete_topics([self.topic]).values():
            future.result(timeout=10)
        create_topic(self.stack.bootstrap_servers, self.topic, PARTITIONS)
        self.in_topic = 0
        self.produce(records)
        stopped: dict[str, str] = {}

        def all_stopped() -> bool:
            status = self.api("GET", f"/supervisor/{self.datasource}/status")
            stopped.update(status.json()["payload"].get("stoppedPartitions") or {})
            return len(stopped) == PARTITIONS

        wait_until(all_stopped, "the supervisor to stop the re-created topic's partitions", 90)
        assert self.api("POST", f"/supervisor/{self.datasource}/resetOffsets", json={
            "type": "kafka", "partitions": {"type": "end", "stream": self.topic,
                                            "partitionOffsetMap": {p: 0 for p in stopped}}}).status_code == 200


@pytest.fixture()
def store_postgres() -> Any:
    """A PostgreSQL of this test's own: crashing it must not disturb the session's."""
    workdir = Path(tempfile.mkdtemp(prefix="overlord-fault-pg-"))
    workdir.chmod(0o755)  # run as `nobody` when we are root: the path must be traversable
    postgres = EmbeddedPostgres(workdir / "postgres")
    postgres.start()
    yield postgres
    postgres.stop()
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.mark.timeout(max(900, ROUNDS * 30))  # the long mode runs for many minutes
def test_randomized_faults_lose_duplicate_and_miscount_nothing(stack, store_postgres, make_topic, datasource,
                                                               tmp_path):
    seed = int(os.environ.get("FAULT_SEED") or random.SystemRandom().randrange(2**32))
    print(f"FAULT_SEED={seed}")
    rng = random.Random(seed)
    topic = make_topic(PARTITIONS)
    env = stack.as_env() | {"OVERLORD_DATABASE_URL": store_postgres.url, "OVERLORD_SPARK_MASTER": "local[2]",
                            "OVERLORD_DEEP_STORAGE": str(tmp_path / "deep"), "OVERLORD_COMPACTION_PERIOD_S": "3",
                            "OVERLORD_TASK_MIN_INTERVAL_S": "0.5"}
    store = sa.create_engine(store_postgres.url, pool_pre_ping=True)
    cluster = Cluster(stack, env, tmp_path, store, datasource, topic, store_postgres)
    try:
        assert cluster.api("POST", "/supervisor", json=spec_json(datasource, topic, taskCount=2,
                                                                 replicas=2)).status_code == 200
        assert httpx.post(f"{cluster.leader().url}/druid/coordinator/v1/config/compaction", timeout=30, json={
            "dataSource": datasource, "skipOffsetFromLatest": "PT0S"}).status_code == 200
        weighted: dict[str, tuple[Callable[[], None], int]] = {
            "stop_task": (cluster.stop_task, 3), "kill_python_worker": (cluster.kill_python_worker, 3),
            "terminate_sessions": (cluster.terminate_sessions, 3), "restart_postgres": (cluster.restart_postgres, 3),
            "kill_leader_session": (cluster.kill_leader_session, 3), "cleanup": (cluster.cleanup_now, 3),
            "reset_racing_publish": (cluster.reset_racing_publish, 3), "freeze_leader": (cluster.freeze_leader, 1),
            "kill_overlord": (cluster.kill_overlord, 1)}
        every = list(weighted)
        rng.shuffle(every)  # every fault at least once, then at random by weight; the topic re-created once
        plan = (every + rng.choices(every, [weighted[k][1] for k in every], k=ROUNDS))[:max(ROUNDS - 1, 1)]
        plan.insert(2 * len(plan) // 3, "recreate_topic")
        injected: Counter[str] = Counter()
        started = time.monotonic()
        for round_no, kind in enumerate(plan):
            start = datetime(2026, 11, 1, tzinfo=UTC) + timedelta(hours=rng.randrange(6))
            sample = make_sample_events(rng.randrange(200, 2_000), seed=rng.randrange(2**31), bad_every=0,
                                        start=start)
            if round_no == len(plan) // 3:
                cluster.update_spec()
                injected["spec_update"] += 1
            if kind == "recreate_topic":
                cluster.recreate_topic(sample.records)
            else:
                fault = threading.Timer(rng.uniform(0, 1.5), weighted[kind][0])
                cluster.produce(sample.records)
                fault.start()
                fault.join()
            injected[kind] += 1
            wait_until(lambda: cluster.committed() == cluster.in_topic,
                       f"round {round_no} ({kind}) committed (FAULT_SEED={seed})", 180)
            outcome = compare(cluster.expected, published_rows(store, datasource))
            assert outcome == {"lost": 0, "duplicated": 0, "keys_wrong": 0}, (round_no, kind, seed, outcome)
            print(f"round {round_no} ({kind}): exact, {cluster.produced} records produced", flush=True)
        found = published_rows(store, datasource)
        report = {"rounds": len(plan), "seed": seed, "faults": dict(sorted(injected.items())),
                  "records_produced": cluster.produced,
                  "records_expected": sum(r[0] for r in cluster.expected.rows.values()),
                  "records_published": sum(r[0] for r in found.values()), "keys": len(found),
                  **compare(cluster.expected, found), "seconds": round(time.monotonic() - started, 1)}
        print(json.dumps(report))
        if len(plan) >= 100:
            RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    finally:
        for server in cluster.servers:
            if server.process.poll() is None:
                signal_tree(server.process.pid, signal.SIGCONT)
                server.kill()
        store.dispose()
