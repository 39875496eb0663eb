"""Shared test helpers: spec builders, waiting, and reading back what was published."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import fsspec
import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
import uvicorn
from fsspec.core import url_to_fs

from overlord.config import Settings
from overlord.dev.sample_data import SampleEvents, make_sample_events
from overlord.dev.stack import DevStack, free_port
from overlord.supervisor.manager import Overlord
from overlord.supervisor.policy import SupervisorPolicy
from segment_store import committed_offsets
from segment_store.database import metadata_engine
from segment_store.timeline import visible_segments
from specs import EXAMPLES_DIR, SupervisorSpec, load_example, load_supervisor_spec

ON_EVERY_DEEP_STORAGE = pytest.mark.parametrize("deep_storage", ["local", "s3"], indirect=True)
"""Run a test (or, as ``pytestmark``, a module) on a local segment root and on S3 (moto)."""

READER, WRITER = ("grafana", "read-pw-1"), ("admin", "write-pw-2")
"""Users of the ``auth_file`` fixture: (name, password) with the read and the write role."""


def spec_json(datasource: str, topic: str | None, **io: Any) -> dict[str, Any]:
    """The example ``events`` spec for a datasource and topic (None: give a topicPattern), period PT1S,
    ioConfig overrides.
    """
    raw = load_example("events").to_druid_json()
    raw["spec"]["dataSchema"]["dataSource"] = datasource
    raw["spec"]["ioConfig"].update(topic=topic, period="PT1S", **io)
    if topic is None:
        del raw["spec"]["ioConfig"]["topic"]
    return raw


def events_spec(datasource: str, topic: str = "unused", *, rollup: bool = True, **tuning: Any) -> SupervisorSpec:
    """The example ``events`` spec as a model, with rollup on or off and tuningConfig overrides."""
    raw = spec_json(datasource, topic)
    raw["spec"]["dataSchema"]["granularitySpec"]["rollup"] = rollup
    raw["spec"]["tuningConfig"].update(tuning)
    return load_supervisor_spec(raw)


def settings_for(stack: DevStack, deep_storage: str) -> Settings:
    return stack.settings(deep_storage)


def overlord_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``overlord ARGS`` in a fresh interpreter, the environment plus ``env``."""
    return subprocess.run([sys.executable, "-m", "overlord.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(0.2)


def committed_total(engine: sa.Engine, datasource: str) -> int:
    """The sum of a datasource's committed offsets, -1 if it has none."""
    stored = committed_offsets(engine, datasource)
    return sum(stored.offsets.values()) if stored is not None else -1


def file_exists(path: str) -> bool:
    """Whether a local or ``s3://`` file exists (never a cached listing)."""
    fs, local = url_to_fs(path, skip_instance_cache=True) if path.startswith("s3://") else url_to_fs(path)
    return bool(fs.exists(local))


def read_bytes(path: str) -> bytes:
    """A local or ``s3://`` file's bytes."""
    with fsspec.open(path, "rb") as file:
        data: bytes = file.read()
    return data


def published_table(engine: sa.Engine, datasource: str) -> pa.Table:
    """Every row a query can see: the timeline's visible segments, read back from their files."""
    tables = [pq.read_table(seg.path) for seg in visible_segments(engine, datasource)]
    return pa.concat_tables(tables, promote_options="default") if tables else pa.table({})  # columns added later


def merged(*parts: SampleEvents) -> SampleEvents:
    """The expected totals of several produced samples together."""
    total = make_sample_events(0)
    for part in parts:
        total.count_by_country.update(part.count_by_country)
        total.value_by_country.update(part.value_by_country)
        for country, price in part.price_by_country.items():
            total.price_by_country[country] += price
    return total


def assert_exact(table: pa.Table, sample: SampleEvents) -> None:
    """Per-country event counts and value/price sums equal what was produced, and min/max hold."""
    counts: Counter[str] = Counter()
    values: Counter[str] = Counter()
    prices: defaultdict[str, float] = defaultdict(float)
    for row in table.to_pylist():
        counts[row["country"]] += row["count"]
        values[row["country"]] += row["value_sum"]
        prices[row["country"]] += row["price_sum"]
        assert row["value_min"] <= row["value_max"]
    assert counts == sample.count_by_country
    assert values == sample.value_by_country
    assert prices.keys() == sample.price_by_country.keys()
    for country, total in sample.price_by_country.items():
        assert prices[country] == pytest.approx(total, rel=1e-9)


def fresh_database(admin: sa.Engine) -> str:
    """Create an empty database on the session's PostgreSQL (through ``admin``); return its URL."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    return admin.url.set(database=name).render_as_string(hide_password=False)


def start_overlord(stack: DevStack, admin: sa.Engine, spark: Any, deep_storage: str, *,
                   policy: SupervisorPolicy | None = None, database_url: str | None = None,
                   before_publish: Any = None, **settings: Any) -> Overlord:
    """A started overlord on a fresh database of the session's PostgreSQL, or on ``database_url``
    (a restart), its duties (compaction, retention, kill, Iceberg export) off unless their periods are
    given; stop it when done.
    """
    url = database_url or fresh_database(admin)
    for duty in ("compaction_period_s", "retention_period_s", "kill_period_s", "iceberg_period_s"):
        settings.setdefault(duty, 0)  # tests run the duties by hand: deterministic
    settings.setdefault("resident_runners", 1)  # the session's Spark has slots for four (conftest's ``spark``)
    settings.setdefault("query_standby", False)  # a second query JVM per test costs the suite minutes
    settings.setdefault("query_engine_eager", False)  # so does a query JVM for each test that runs no query
    overlord = Overlord(Settings(database_url=url, deep_storage=deep_storage,
                                 kafka_bootstrap_servers=stack.bootstrap_servers, **settings),
                        metadata_engine(url), spark, policy, before_publish)
    overlord.start()
    return overlord


@contextmanager
def paused_at_lock(engine: sa.Engine) -> Iterator[tuple[sa.Engine, threading.Event, threading.Event]]:
    """An engine on ``engine``'s database whose first statement that locks a row (``FOR UPDATE``) pauses there:
    ``locked`` is set then, and it goes on once ``release`` is set.
    """
    locked, release = threading.Event(), threading.Event()
    paused = sa.create_engine(engine.url, pool_size=5)

    def hold(_conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if "FOR UPDATE" in statement and cursor.rowcount > 0 and not locked.is_set():  # a row locked (maybe new)
            locked.set()
            assert release.wait(20)

    sa.event.listen(paused, "after_cursor_execute", hold)
    try:
        yield paused, locked, release
    finally:
        release.set()
        paused.dispose()


def wait_for_lock_waiter(engine: sa.Engine, timeout_s: float = 10.0) -> None:
    """Wait until some session of the database is blocked on a lock (a real wait, not a sleep)."""
    query = sa.text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND datname = current_database()")

    def waiting() -> bool:
        with engine.connect() as conn:
            return int(conn.execute(query).scalar_one()) > 0

    wait_until(waiting, "a session to wait on a lock", timeout_s)


def example_json(name: str) -> dict[str, Any]:
    """An example spec of ``specs/examples`` as a JSON object."""
    loaded: dict[str, Any] = json.loads((EXAMPLES_DIR / f"{name}.json").read_text(encoding="utf-8"))
    return loaded


def _with_repo(python_path: str | None) -> str:
    """``PYTHONPATH`` with this checkout first: ``python -m tests.fault_overlord`` must find ``tests`` even where
    ``PYTHONSAFEPATH`` is set (an in-process ``overlord`` command sets it for the processes it starts).
    """
    root = str(Path(__file__).resolve().parents[1])
    return os.pathsep.join([root, *([python_path] if python_path else [])])


class OverlordProcess:
    """``overlord serve`` as a real child process, the environment plus ``env``; with fault options
    (``--pause-before-publish``, ...) it runs ``tests.fault_overlord`` instead.
    """

    def __init__(self, env: dict[str, str], log: Path, *faults: str, ready_s: float = 90,
                 command: Sequence[str] = (sys.executable, "-m", "overlord.cli"), cwd: Path | None = None) -> None:
        port = str(free_port())
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        argv = [sys.executable, "-m", "tests.fault_overlord", *faults] if faults else [*command, "serve",
                                                                                      "--insecure-open"]
        with log.open("ab") as out:
            self.process = subprocess.Popen([*argv, "--port", port], cwd=cwd,
                                            env={**os.environ, "OVERLORD_QUERY_STANDBY": "false",
                                                 "OVERLORD_QUERY_ENGINE_EAGER": "false", **env,
                                                 "PYTHONPATH": _with_repo(env.get("PYTHONPATH"))},
                                            stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_until(self._serving, "the overlord to answer /health", ready_s)
        except BaseException:
            self.kill()  # the caller never gets a handle to stop it
            raise

    def _serving(self) -> bool:
        """Whether the API answers and ingestion's Spark runs (a part that cannot run still makes /health 503)."""
        if self.process.poll() is not None:
            raise AssertionError(f"overlord exited with {self.process.returncode}; see {self.log}")
        try:
            answer = httpx.get(f"{self.url}/health", timeout=1)
        except httpx.HTTPError:
            return False
        return answer.status_code == 200 or answer.json().get("spark", {}).get("healthy") is True

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def terminate(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(60)


@contextmanager
def served(app: Any, port: int | None = None, *, queries: bool = True) -> Iterator[str]:
    """Serve ``app`` with uvicorn on loopback (``port``, or a free one) in a thread; yields its base URL.

    ``queries``: wait for the query engine first (a cold one takes longer than a test client waits); a test
    that sends no query says False and spares the engine's start, about 15 s.
    """
    port = port or free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, lifespan="off"))
    thread = threading.Thread(target=server.run, name="api-server", daemon=True)
    thread.start()
    wait_until(lambda: server.started, "the API server to start", 10)
    if queries and hasattr(app.state, "queries"):
        app.state.queries.wait_started()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        if hasattr(app.state, "queries"):
            app.state.queries.stop()
