"""Session fixtures: a real Tansu broker, a real PostgreSQL and a real local Spark.

Nothing here skips: a missing component makes the fixture, and so the test, fail loudly.
Tests that use none of them are marked ``unit``: ``pytest -m unit`` runs just those, in seconds.
"""

from __future__ import annotations

import json
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from confluent_kafka.admin import AdminClient, NewTopic

from overlord.dev.stack import DevStack, dev_stack


@pytest.fixture(scope="session")
def stack() -> Iterator[DevStack]:
    # Not under pytest's basetemp: it is mode 0700, and as root PostgreSQL runs as `nobody`,
    # which needs a world-traversable path to its data directory (see EmbeddedPostgres).
    with tempfile.TemporaryDirectory(prefix="overlord-test-stack-") as workdir:
        with dev_stack(Path(workdir)) as running:
            yield running


@pytest.fixture(scope="session")
def engine(stack: DevStack) -> Iterator[sa.Engine]:
    from segment_store import upgrade_schema

    eng = sa.create_engine(stack.database_url, pool_size=10)
    upgrade_schema(eng)
    yield eng
    eng.dispose()


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """Moto's S3 server on loopback, configured the way a deployment is: the standard ``AWS_*``
    environment, which s3fs, pyarrow and the Spark workers (started after this) all read.
    """
    from moto.server import ThreadedMotoServer

    from overlord.dev.stack import free_port

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.delenv("AWS_PROFILE", raising=False)
            for name, value in {"AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_ACCESS_KEY_ID": "testing",
                                "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}.items():
                mp.setenv(name, value)
            yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture(scope="session")
def spark(s3_endpoint: str) -> Iterator[object]:
    """A local Spark, started after the S3 environment is set so its Python workers inherit it."""
    from indexing_task.spark import get_spark

    session = get_spark("local[2]", resident_slots=4)  # for the resident runners of the overlords a test starts
    yield session
    session.stop()


@pytest.fixture()
def deep_storage(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty segment root: a local directory, or a new S3 bucket when parametrized
    ``indirect`` with ``"s3"`` (see ``tests.helpers.ON_EVERY_DEEP_STORAGE``).
    """
    if getattr(request, "param", "local") == "local":
        return str(tmp_path / "deep")
    import s3fs

    request.getfixturevalue("s3_endpoint")
    bucket = f"deep-{uuid.uuid4().hex[:12]}"
    s3fs.S3FileSystem(skip_instance_cache=True).mkdir(bucket)
    return f"s3://{bucket}/deep"


@pytest.fixture()
def make_topic(stack: DevStack) -> Iterator[object]:
    """Create a fresh uuid-named topic: ``make_topic(partitions) -> name``."""
    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})

    def create(partitions: int = 1) -> str:
        name = f"t-{uuid.uuid4().hex[:12]}"
        for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
            future.result(timeout=10)
        return name

    yield create


@pytest.fixture()
def datasource() -> str:
    return f"ds_{uuid.uuid4().hex[:12]}"


@pytest.fixture()
def make_overlord(stack: DevStack, engine: sa.Engine, spark: object, deep_storage: str
                  ) -> Iterator[Callable[..., Any]]:
    """``make_overlord(policy=..., **settings) -> Overlord``: started on a fresh database and the
    test's ``deep_storage``, stopped at teardown.
    """
    from tests.helpers import start_overlord

    started: list[Any] = []

    def start(**options: Any) -> Any:
        overlord = start_overlord(stack, engine, spark, deep_storage, **options)
        started.append(overlord)
        return overlord

    yield start
    for overlord in started:
        overlord.stop(grace_s=10)
        overlord.engine.dispose()


@pytest.fixture
def coordinator_of(make_overlord: Callable[..., Any]) -> Iterator[Callable[[Any], Any]]:
    """``coordinator_of(overlord) -> Coordinator``: the duties over an overlord of ``make_overlord``, started
    (a duty whose period is 0 is not scheduled), stopped at teardown before the overlord.
    """
    from overlord.coordinator.duties import Coordinator

    started: list[Any] = []

    def start(overlord: Any) -> Any:
        coordinator = Coordinator(overlord)
        coordinator.start()
        started.append(coordinator)
        return coordinator

    yield start
    for coordinator in started:
        coordinator.stop()


@pytest.fixture(scope="module")
def token() -> tuple[str, str]:
    """A bearer token of the write role and its SHA-256 digest."""
    from overlord.http.auth import new_token

    return new_token()


@pytest.fixture(scope="module")
def auth_file(tmp_path_factory: pytest.TempPathFactory, token: tuple[str, str]) -> Path:
    """An auth file with a reader (READER), a writer (WRITER) and ``token``."""
    from overlord.http.auth import hash_password
    from tests.helpers import READER, WRITER

    path = tmp_path_factory.mktemp("auth") / "auth.json"
    path.write_text(json.dumps({
        "users": {READER[0]: {"role": "read", "passwordHash": hash_password(READER[1])},
                  WRITER[0]: {"role": "write", "passwordHash": hash_password(WRITER[1])}},
        "tokens": {"ci": {"role": "write", "tokenSha256": token[1]}}}))
    return path


@pytest.fixture(scope="module")
def secured(stack: DevStack, engine: sa.Engine, spark: object, tmp_path_factory: pytest.TempPathFactory,
            auth_file: Path) -> Iterator[tuple[str, Any]]:
    """An overlord's HTTP API with authentication on, over real HTTP: (base URL, app).

    One per module: shared across modules, the fuzzer's and the password flood's load met later tests as 429s.
    """
    from overlord.http.app import create_app
    from overlord.http.auth import Authenticator, AuthFile
    from overlord.http.redact import SecretRegistry
    from tests.helpers import served, start_overlord

    overlord = start_overlord(stack, engine, spark, str(tmp_path_factory.mktemp("deep")))
    app = create_app(overlord, SecretRegistry(), authenticator=Authenticator(AuthFile.load(auth_file)))
    try:
        with served(app) as url:
            yield url, app
    finally:
        overlord.stop(grace_s=10)
        overlord.engine.dispose()


_INFRASTRUCTURE = {"stack", "engine", "spark", "s3_endpoint", "make_topic", "make_overlord", "secured"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that starts no broker, PostgreSQL or Spark as ``unit``."""
    for item in items:
        if not _INFRASTRUCTURE.intersection(getattr(item, "fixturenames", ())) and not item.get_closest_marker(
                "own_stack"):
            item.add_marker(pytest.mark.unit)
