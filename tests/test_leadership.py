"""Two overlords on one metadata store: one leads, the other takes over when the leader's session dies."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa

from overlord.dev.sample_data import make_sample_events, produce
from overlord.overlord_errors import NotLeader
from segment_store.leadership import LEADER_LOCK_KEY
from tests.helpers import assert_exact, committed_total, merged, published_table, spec_json, wait_until


def kill_lock_session(engine: sa.Engine, *, held: bool = True) -> None:
    """End the PostgreSQL session that holds the leader lock, as a dead process or a lost network would.

    ``held=False``: the leader may have stopped renewing its lease, so PostgreSQL may have ended it already.
    """
    with engine.connect() as conn:
        killed = conn.execute(sa.text(
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND objid = :key AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"),
            {"key": LEADER_LOCK_KEY}).scalars().all()
    assert killed == [True] if held else killed in ([], [True])


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


def test_a_deposed_leader_stops_its_compactions_too(make_overlord):
    """Step-down stopped the supervisors' tasks only: a compaction ran on, to be refused at its swap at best."""
    leader = make_overlord()
    started, stopped = threading.Event(), threading.Event()

    def compaction(stop: threading.Event) -> None:
        started.set()
        if stop.wait(30):
            stopped.set()

    done = leader.runner.submit_work("compact_x", "compaction of x", compaction, owner="x", compaction=True)
    assert started.wait(30)
    kill_lock_session(leader.engine)
    assert stopped.wait(30), "the deposed leader's compaction was never stopped"
    done.result(10)


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
        for client in (to_standby, to_leader):  # Druid's call: any overlord names the leader
            named = client.get("/druid/indexer/v1/leader")
            assert named.status_code == 200 and named.text == "http://leader.example:8090"


def test_readiness_tells_the_leader_from_a_standby_without_credentials(make_overlord):
    """An orchestrator routes to the ready overlord: the leader; it sends no credentials."""
    from starlette.testclient import TestClient

    from overlord.http.app import create_app
    from overlord.http.auth import Authenticator, AuthFile

    leader = make_overlord()
    standby = make_overlord(database_url=leader.settings.database_url)
    nobody = Authenticator(AuthFile.model_validate({"users": {}, "tokens": {}}))
    apps = [create_app(o, authenticator=nobody) for o in (leader, standby)]
    try:
        with TestClient(apps[0]) as to_leader, TestClient(apps[1]) as to_standby:
            assert to_leader.get("/health/leader").status_code == 200
            assert to_leader.get("/health/leader").json() == {"leader": True}
            assert to_standby.get("/health/leader").status_code == 503
            assert to_standby.get("/health/leader").json() == {"leader": False}
            assert to_standby.get("/druid/indexer/v1/leader").status_code == 401  # only the probe is open
    finally:
        for app in apps:
            app.state.queries.stop()
        nobody.close()


def test_a_standby_whose_leader_advertises_no_url_says_who_leads(make_overlord):
    leader = make_overlord()
    standby = make_overlord(database_url=leader.settings.database_url)
    with client_of(standby) as to_standby:
        answer = to_standby.get("/druid/indexer/v1/supervisor")
    assert answer.status_code == 503
    message = answer.json()["errorMessage"]
    assert leader.elector.name in message and "OVERLORD_ADVERTISED_URL" in message



def test_the_command_line_client_pointed_at_a_standby_reaches_the_leader_with_its_credentials(
        make_overlord, make_topic, datasource, monkeypatch):
    """Over real HTTP, authentication on: the standby's 307 leads to another origin, where a client that follows
    redirects the usual way drops the credentials; ours sends them again to the leader it is sent to.
    """
    from overlord.cli.client import OverlordClient
    from overlord.dev.stack import free_port
    from overlord.http.app import create_app
    from overlord.http.auth import Authenticator, AuthFile, new_token
    from tests.helpers import served

    token, digest = new_token()
    auth = Authenticator(AuthFile.model_validate({"tokens": {"ci": {"role": "write", "tokenSha256": digest}}}))
    port = free_port()
    leader = make_overlord(advertised_url=f"http://127.0.0.1:{port}")
    standby = make_overlord(database_url=leader.settings.database_url)
    monkeypatch.setenv("OVERLORD_TOKEN", token)
    try:
        with served(create_app(leader, authenticator=auth), port, queries=False), \
                served(create_app(standby, authenticator=auth), queries=False) as standby_url:
            client = OverlordClient(standby_url)
            assert client.request("POST", "/supervisor", json=spec_json(datasource, make_topic(1)))["id"] == datasource
            assert datasource in leader.supervisors and standby.supervisors == {}
            assert client.request("GET", "/supervisor") == [datasource]  # reads are the leader's too
    finally:
        auth.close()
