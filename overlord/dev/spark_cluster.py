"""A Spark standalone cluster on loopback: one master and its workers, from pyspark's ``spark-class``.

The pip package has no ``sbin/start-*.sh``; ``bin/spark-class`` starts the same daemons. For
tests, benchmarks and trying the cluster deployment on one machine. Executors run the driver's
Python (``PYSPARK_PYTHON``), so they import the project from the same installation, as workers
of a real deployment import it from their image.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyspark

from overlord.dev.stack import free_port

__all__ = ["SparkCluster", "spark_cluster"]

_HOST = "127.0.0.1"


class SparkCluster:
    """A master and ``workers`` workers of ``cores`` cores and ``memory`` each; logs under ``workdir``."""

    def __init__(self, workdir: Path, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        self.workdir = workdir
        self.port, self.ui_port = free_port(), free_port()
        self.workers, self.cores, self.memory = workers, cores, memory
        self._processes: list[subprocess.Popen[bytes]] = []

    @property
    def master_url(self) -> str:
        return f"spark://{_HOST}:{self.port}"

    def start(self, timeout_s: float = 120.0) -> None:
        """Start the master and the workers; return once every worker has registered."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._launch("master", "org.apache.spark.deploy.master.Master", "--host", _HOST, "--port", str(self.port),
                     "--webui-port", str(self.ui_port))
        for n in range(self.workers):
            work_dir = self.workdir / f"worker-{n}"
            self._launch(f"worker-{n}", "org.apache.spark.deploy.worker.Worker", "--host", _HOST,
                         "--cores", str(self.cores), "--memory", self.memory, "--webui-port", str(free_port()),
                         "--work-dir", str(work_dir), self.master_url)
        deadline = time.monotonic() + timeout_s
        while self._alive_workers() < self.workers:
            for process in self._processes:
                if process.poll() is not None:
                    raise RuntimeError(f"a Spark process exited with {process.returncode}; see {self.workdir}/*.log")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Spark workers did not register within {timeout_s:.0f} s; see {self.workdir}")
            time.sleep(0.5)

    def state(self) -> dict[str, Any]:
        """The master's view (its web UI's JSON): ``workers``, ``activeapps``, ``completedapps``, ..."""
        with urllib.request.urlopen(f"http://{_HOST}:{self.ui_port}/json/", timeout=5) as answer:
            state: dict[str, Any] = json.load(answer)
        return state

    def stop(self) -> None:
        """Stop the workers, then the master (SIGTERM, then SIGKILL after 20 s)."""
        for process in reversed(self._processes):
            process.terminate()
        for process in self._processes:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        self._processes.clear()

    def _alive_workers(self) -> int:
        try:
            return sum(w.get("state") == "ALIVE" for w in self.state().get("workers", []))
        except (OSError, ValueError):
            return 0  # the master's UI is not up yet, or answers before it has a state (an empty body)

    def _launch(self, name: str, main_class: str, *args: str) -> None:
        home = Path(pyspark.__file__).parent
        env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": _HOST, "SPARK_NO_DAEMONIZE": "1"}
        with (self.workdir / f"{name}.log").open("ab") as log:
            self._processes.append(subprocess.Popen([str(home / "bin" / "spark-class"), main_class, *args],
                                                    env=env, stdout=log, stderr=subprocess.STDOUT))


@contextmanager
def spark_cluster(workdir: Path, workers: int = 2, cores: int = 1, memory: str = "1g") -> Iterator[SparkCluster]:
    """A started :class:`SparkCluster`, stopped on exit."""
    cluster = SparkCluster(workdir, workers, cores, memory)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
