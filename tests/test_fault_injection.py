"""Randomized fault injection on real components: every round produces a known batch, injects one fault
at a random moment, and ends with an exact comparison of what is published against what was produced.

Two overlords share one metadata store (one leads, one stands by) and run one supervisor over a
two-partition topic. Faults: a task stopped mid-flight, a Spark Python worker SIGKILLed, every
PostgreSQL session of the store terminated (publishes in flight included), the leader's session
killed (the standby takes over), a cleanup with zero grace racing the tasks, a resetOffsets to the
committed offsets, atomically, racing a publish (in-flight tasks are fenced by the epoch and read again).

Short mode in the suite (``FAULT_ROUNDS``, default 20); a long run:
``FAULT_ROUNDS=200 pytest tests/test_fault_injection.py -s`` writes ``benchmarks/results/faults.json``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import threading
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from overlord.dev.sample_data import make_sample_events, produce
from segment_store import DeepStorage, cleanup
from tests.helpers import committed_total, published_table, spec_json, wait_until

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

    def __init__(self, overlords: list[Any], admin: sa.Engine, storage: DeepStorage, datasource: str) -> None:
        self.overlords, self.admin, self.storage, self.datasource = overlords, admin, storage, datasource

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


def test_randomized_faults_lose_and_duplicate_nothing(stack, engine, make_topic, datasource, make_overlord):
    rng = random.Random(int(os.environ.get("FAULT_SEED", "20261122")))
    topic = make_topic(2)
    first = make_overlord(name="fault-a")
    second = make_overlord(name="fault-b", database_url=first.settings.database_url)
    store = first.engine
    first.submit(spec_json(datasource, topic, taskCount=2))
    faults = Faults([first, second], engine, DeepStorage(first.settings.deep_storage), datasource)
    kinds = {"stop_task": faults.stop_task, "kill_python_worker": faults.kill_python_worker,
             "terminate_sessions": faults.terminate_sessions, "kill_leader_session": faults.kill_leader_session,
             "cleanup": faults.cleanup_now, "reset_racing_publish": faults.reset_in_place}
    injected: Counter[str] = Counter()
    expected: Counter[str] = Counter()
    produced = 0
    started = time.monotonic()
    for round_no in range(ROUNDS):
        sample = make_sample_events(rng.randrange(200, 2_000), seed=round_no, bad_every=0)
        kind = rng.choice(sorted(kinds))
        delay = rng.uniform(0, 1.5)
        timer = threading.Timer(delay, kinds[kind])
        produce(stack.bootstrap_servers, topic, sample.records, 2)
        timer.start()
        produced += len(sample.records)
        expected.update(sample.count_by_country)
        injected[kind] += 1
        timer.join()
        wait_until(lambda total=produced: committed_total(store, datasource) == total,
                   f"round {round_no} ({kind}) committed", 120)
    found: Counter[str] = Counter()
    for row in published_table(store, datasource).to_pylist():
        found[row["country"]] += row["count"]
    lost = sum((expected - found).values())
    duplicated = sum((found - expected).values())
    report = {"rounds": ROUNDS, "faults": dict(injected), "records_produced": produced,
              "records_published": sum(found.values()), "lost": lost, "duplicated": duplicated,
              "seconds": round(time.monotonic() - started, 1)}
    print(json.dumps(report))
    if ROUNDS >= 100:
        RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    assert (lost, duplicated) == (0, 0), report
    assert found == expected
