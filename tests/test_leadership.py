"""Two overlords on one metadata store: one leads, the other takes over when the leader's session dies."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import psutil
import pytest
import sqlalchemy as sa

from overlord.dev.sample_data import make_sample_events, produce
from overlord.errors import NotLeader
from segment_store.leadership import LEADER_LOCK_KEY
from tests.helpers import (
    OverlordProcess,
    assert_exact,
    committed_total,
    fresh_database,
    merged,
    published_table,
    spec_json,
    wait_until,
)


def kill_lock_session(engine: sa.Engine) -> None:
    """End the PostgreSQL session that holds the leader lock, as a dead process or a lost network would."""
    with engine.connect() as conn:
        killed = conn.execute(sa.text(
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND objid = :key AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"),
            {"key": LEADER_LOCK_KEY}).scalars().all()
    assert killed == [True]


def test_one_overlord_leads_and_a_standby_takes_over_exactly(stack, make_topic, datasource, make_overlord):
    topic = make_topic(2)
    first, second = make_sample_events(3_000, seed=21), make_sample_events(3_000, seed=22)
    leader = make_overlord(name="overlord-a")
    standby = make_overlord(name="overlord-b", database_url=leader.settings.database_url)
    assert leader.leading and not standby.leading
    with pytest.raises(NotLeader):
        standby.submit(spec_json(datasource, topic))
    leader.submit(spec_json(datasource, topic))
    assert standby.supervisors == {}  # a standby runs nothing

    engine = leader.engine
    produce(stack.bootstrap_servers, topic, first.records, 2)
    wait_until(lambda: committed_total(engine, datasource) == len(first.records), "the leader publishes")

    kill_lock_session(engine)
    lost = time.monotonic()
    wait_until(lambda: standby.leading, "the standby to take over", 15)
    took_over_s = time.monotonic() - lost
    wait_until(lambda: not leader.leading and leader.supervisors == {}, "the old leader to step down", 15)
    assert standby.elector.epoch is not None and standby.elector.epoch > 1
    print(f"takeover after {took_over_s:.1f} s")

    produce(stack.bootstrap_servers, topic, second.records, 2)
    wait_until(lambda: committed_total(engine, datasource) == len(first.records) + len(second.records),
               "the new leader resumes from the committed offsets")
    assert_exact(published_table(engine, datasource), merged(first, second))


@contextmanager
def client_of(overlord: Any) -> Iterator[Any]:
    """A test client of ``overlord``'s app (no server; its query engine stopped at the end)."""
    from starlette.testclient import TestClient

    from overlord.http.app import create_app

    app = create_app(overlord, authenticator=None)
    try:
        with TestClient(app, base_url="http://127.0.0.1:8090", follow_redirects=False) as client:
            yield client
    finally:
        app.state.queries.stop()


def test_a_standby_redirects_the_api_to_the_leader_it_advertises(make_overlord):
    """Druid's overlords redirect to the leader; a standby answered ``[]`` for the supervisors and a bare 503."""
    leader = make_overlord(advertised_url="http://leader.example:8090")
    standby = make_overlord(database_url=leader.settings.database_url)  # no advertised URL of its own: fine
    assert leader.leading and not standby.leading
    with client_of(standby) as to_standby, client_of(leader) as to_leader:
        answer = to_standby.get("/druid/indexer/v1/supervisor?state=true")
        assert answer.status_code == 307
        assert answer.headers["location"] == "http://leader.example:8090/druid/indexer/v1/supervisor?state=true"
        write = to_standby.post("/druid/indexer/v1/supervisor/suspendAll")
        assert write.status_code == 307 and write.headers["location"].startswith("http://leader.example:8090/")
        coordinator = to_standby.get("/druid/coordinator/v1/config/compaction")
        assert coordinator.status_code == 307
        assert to_standby.get("/druid/indexer/v1/isLeader").status_code == 404  # answered for itself
        assert to_standby.get("/health").status_code == 200
        assert to_leader.get("/druid/indexer/v1/supervisor?state=true").json() == []  # where the redirect leads


def test_a_standby_whose_leader_advertises_no_url_says_who_leads(make_overlord):
    leader = make_overlord()
    standby = make_overlord(database_url=leader.settings.database_url)
    with client_of(standby) as to_standby:
        answer = to_standby.get("/druid/indexer/v1/supervisor")
    assert answer.status_code == 503
    message = answer.json()["errorMessage"]
    assert leader.elector.name in message and "OVERLORD_ADVERTISED_URL" in message


def _signal_tree(pid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to a process and all its descendants (SIGSTOP: the whole overlord stalls, as in a VM pause)."""
    root = psutil.Process(pid)
    for process in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(sig)


def _leads(server: OverlordProcess) -> bool:
    return httpx.get(f"{server.url}/druid/indexer/v1/isLeader", timeout=5).status_code == 200


def test_a_frozen_leader_loses_the_lead_and_the_standby_publishes_exactly(stack, engine, make_topic, datasource,
                                                                         tmp_path):
    """A leader stalled (SIGSTOP) keeps its TCP connection: only an idle session timeout frees the lock."""
    topic = make_topic(2)
    env = stack.as_env() | {"OVERLORD_DATABASE_URL": fresh_database(engine), "OVERLORD_SPARK_MASTER": "local[2]",
                            "OVERLORD_DEEP_STORAGE": str(tmp_path / "deep")}
    first = OverlordProcess(env, tmp_path / "first.log")
    second = OverlordProcess(env, tmp_path / "second.log")
    store = sa.create_engine(env["OVERLORD_DATABASE_URL"])
    try:
        assert _leads(first) and not _leads(second)
        assert httpx.post(f"{first.url}/druid/indexer/v1/supervisor", json=spec_json(datasource, topic),
                          timeout=30).status_code == 200
        samples = [make_sample_events(1_000, bad_every=0, seed=s) for s in (81, 82, 83)]
        produce(stack.bootstrap_servers, topic, samples[0].records, 2)
        wait_until(lambda: committed_total(store, datasource) == 1_000, "the leader's publish")

        _signal_tree(first.process.pid, signal.SIGSTOP)
        try:
            produce(stack.bootstrap_servers, topic, samples[1].records, 2)
            wait_until(lambda: _leads(second), "the standby to take over from the frozen leader", 60)
            wait_until(lambda: committed_total(store, datasource) == 2_000, "the new leader's publish")
        finally:
            _signal_tree(first.process.pid, signal.SIGCONT)
        wait_until(lambda: not _leads(first), "the thawed leader to step down", 30)

        produce(stack.bootstrap_servers, topic, samples[2].records, 2)
        wait_until(lambda: committed_total(store, datasource) == 3_000, "the last publish")
        assert_exact(published_table(store, datasource), merged(*samples))
    finally:
        store.dispose()
        for server in (first, second):
            if server.process.poll() is None:
                server.kill()
