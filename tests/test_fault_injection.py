"""Randomized fault injection on real components: every round produces a known batch, injects one fault
at a random moment, and ends with an exact comparison of what is published against what was produced.

Two overlords share one metadata store, a PostgreSQL of this test's own (one leads, one stands by),
and run one supervisor over a two-partition topic. Faults: a task stopped mid-flight, a Spark
Python worker SIGKILLed, every PostgreSQL session of the store terminated (publishes in flight
included), PostgreSQL crashed and restarted (``pg_ctl -m immediate``), the leader's session killed
(the standby takes over), a cleanup with zero grace racing the tasks, a resetOffsets to the
committed offsets, atomically, racing a publish (in-flight tasks are fenced by the epoch and read
again). After every round, per-country counts and value sums are compared exactly with what was
produced so far.

Short mode in the suite (``FAULT_ROUNDS``, default 20); a long run:
``FAULT_ROUNDS=200 pytest tests/test_fault_injection.py -s`` writes ``benchmarks/results/faults.json``.
"""

from __future__ import annotations

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
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from overlord.dev.sample_data import SampleEvents, make_sample_events, produce
from overlord.dev.stack import EmbeddedPostgres
from segment_store import DeepStorage, cleanup
from tests.helpers import assert_exact, committed_total, merged, published_table, spec_json, wait_until

ROUNDS = int(os.environ.get("FAULT_ROUNDS", "20"))
RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "faults.json"


def python_workers() -> list[int]:
    """Pids of Spark's Python worker processes (children of the pyspark daemon)."""
    found = subprocess.run(["pgrep", "-f", "pyspark.daemon"], capture_output=True, text=True).stdout.split()
    daemons = {int(p) for p in found}
    children = subprocess.run(["pgrep", "-P", ",".join(map(str, daemons))], capture_output=True,
                              text=True).stdout.split() if daemons else []
    return [int(p) for p in children]


class Faults:
    """The faults a round may inject, by name."""

    def __init__(self, overlords: list[Any], postgres: EmbeddedPostgres, admin: sa.Engine, storage: DeepStorage,
                 datasource: str) -> None:
        self.overlords, self.postgres, self.admin = overlords, postgres, admin
        self.storage, self.datasource = storage, datasource

    def leader(self) -> Any:
        return next((o for o in self.overlords if o.leading), self.overlords[0])

    def stop_task(self) -> None:
        for sup in list(self.leader().supervisors.values()):
            for task_id in list(sup.active):
                self.leader().runner.stop(task_id)

    def kill_python_worker(self) -> None:
        workers = python_workers()
        if workers:
            os.kill(random.choice(workers), signal.SIGKILL)

    def terminate_sessions(self) -> None:
        with self.admin.connect() as conn:
            conn.execute(sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                 "WHERE datname = :db AND pid <> pg_backend_pid()"),
                         {"db": self.overlords[0].engine.url.database})

    def restart_postgres(self) -> None:
        self.postgres.restart()

    def kill_leader_session(self) -> None:
        with self.admin.connect() as conn:
            conn.execute(sa.text(
                "SELECT pg_terminate_backend(l.pid) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
                "WHERE l.locktype = 'advisory' AND l.granted AND d.datname = :db"),
                {"db": self.overlords[0].engine.url.database})

    def reset_in_place(self) -> None:
        """A reset that moves no offset (empty resetOffsets, atomic under the datasource lock).

        Tasks in flight are stopped and fenced by the new epoch, and their ranges read again. (A
        resetOffsets to offsets read earlier would rewind past publishes made meanwhile: a duplicate
        the operator asked for, not a fault.)
        """
        if self.datasource in self.leader().supervisors:
            self.leader().reset(self.datasource, {})

    def cleanup_now(self) -> None:
        cleanup(self.overlords[0].engine, self.storage, self.datasource, orphan_grace=timedelta(0),
                retention=timedelta(0))


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


@pytest.mark.timeout(max(600, ROUNDS * 15))  # the long mode runs for many minutes
def test_randomized_faults_lose_and_duplicate_nothing(stack, store_postgres, make_topic, datasource, make_overlord):
    rng = random.Random(int(os.environ.get("FAULT_SEED", "20261122")))
    topic = make_topic(2)
    first = make_overlord(name="fault-a", database_url=store_postgres.url)
    second = make_overlord(name="fault-b", database_url=store_postgres.url)
    store = first.engine
    first.submit(spec_json(datasource, topic, taskCount=2))
    admin = sa.create_engine(store_postgres.url, pool_pre_ping=True)
    faults = Faults([first, second], store_postgres, admin, DeepStorage(first.settings.deep_storage), datasource)
    kinds = {"stop_task": faults.stop_task, "kill_python_worker": faults.kill_python_worker,
             "terminate_sessions": faults.terminate_sessions, "restart_postgres": faults.restart_postgres,
             "kill_leader_session": faults.kill_leader_session, "cleanup": faults.cleanup_now,
             "reset_racing_publish": faults.reset_in_place}
    injected: Counter[str] = Counter()
    expected = SampleEvents()
    produced = 0
    started = time.monotonic()
    for round_no in range(ROUNDS):
        sample = make_sample_events(rng.randrange(200, 2_000), seed=round_no, bad_every=0)
        kind = rng.choice(sorted(kinds))
        timer = threading.Timer(rng.uniform(0, 1.5), kinds[kind])
        produce(stack.bootstrap_servers, topic, sample.records, 2)
        timer.start()
        produced += len(sample.records)
        expected = merged(expected, sample)
        injected[kind] += 1
        timer.join()
        wait_until(lambda total=produced: committed_total(store, datasource) == total,
                   f"round {round_no} ({kind}) committed", 120)
        assert_exact(published_table(store, datasource), expected)  # counts and sums, every round
    admin.dispose()
    found: Counter[str] = Counter()
    for row in published_table(store, datasource).to_pylist():
        found[row["country"]] += row["count"]
    lost = sum((expected.count_by_country - found).values())
    duplicated = sum((found - expected.count_by_country).values())
    report = {"rounds": ROUNDS, "faults": dict(injected), "records_produced": produced,
              "records_published": sum(found.values()), "lost": lost, "duplicated": duplicated,
              "seconds": round(time.monotonic() - started, 1)}
    print(json.dumps(report))
    if ROUNDS >= 100:
        RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    assert (lost, duplicated) == (0, 0), report
