"""The long-lived SparkSession that indexing tasks and queries share, and its scheduler pools.

Jobs are scheduled FAIR between two pools: ``ingest`` (indexing and compaction tasks, weight 4,
at least one core whenever it has work) and ``query`` (SQL, weight 1). A heavy query then
slows ingestion by at most a share of the cores, never stops it; within each pool jobs run
FIFO. (Spark does not preempt a running task, so a query's long tasks still hold their cores
until they end or the query's timeout cancels them.)
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from indexing_task.child_processes import SAFE_PATH

__all__ = ["DEEP_STORAGE_ENV", "INGEST_POOL", "QUERY_POOL", "default_parallelism", "get_spark", "use_pool"]

INGEST_POOL = "ingest"
QUERY_POOL = "query"
_POOLS = f"""<?xml version="1.0"?>
<allocations>
  <pool name="{INGEST_POOL}"><schedulingMode>FIFO</schedulingMode><weight>4</weight><minShare>1</minShare></pool>
  <pool name="{QUERY_POOL}"><schedulingMode>FIFO</schedulingMode><weight>1</weight><minShare>0</minShare></pool>
</allocations>
"""


def _pools_file() -> str:
    path = Path(tempfile.gettempdir()) / f"overlord-fair-pools-{os.getpid()}.xml"
    path.write_text(_POOLS, encoding="utf-8")
    return str(path)


_PARALLELISM_MAX_AGE_S = 10.0
_parallelism: dict[int, tuple[float, int]] = {}


def default_parallelism(spark: SparkSession) -> int:
    """``defaultParallelism``, asked of the JVM at most every 10 s: a py4j round trip per task otherwise.

    Executors come and go slowly; a plan a few seconds old splits a backlog as well.
    """
    now = time.monotonic()
    asked, value = _parallelism.get(id(spark), (float("-inf"), 0))
    if now - asked >= _PARALLELISM_MAX_AGE_S:
        value = spark.sparkContext.defaultParallelism
        _parallelism[id(spark)] = (now, value)
    return value


def use_pool(spark: SparkSession, pool: str) -> None:
    """Run this thread's next Spark jobs in scheduler pool ``pool``."""
    spark.sparkContext.setLocalProperty("spark.scheduler.pool", pool)


DEEP_STORAGE_ENV = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                    "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_SHARED_CREDENTIALS_FILE",
                    "AWS_CONFIG_FILE", "AWS_PROFILE")
"""The driver's object-store settings, handed to every executor: one configuration for the whole
job. (Spark's UI and logs redact ``*secret*`` and ``*token*`` values.) A credentials file must be
at the same path on every worker (the compose file and the Kubernetes manifests mount it there).
"""


def get_spark(master: str = "local[*]", conf: Mapping[str, str] | None = None,
              app_name: str = "overlord-indexer", resident_slots: int = 0) -> SparkSession:
    """Return the process's SparkSession, creating it on first use (~5 s cold, ~0.2 s per job after).

    Python workers run the driver's interpreter (``PYSPARK_PYTHON``): on a cluster every worker
    needs the project installed at that path (the docker image does). ``conf`` adds or overrides
    Spark properties. ``resident_slots`` task slots are added to a ``local[*]`` or ``local[N]``
    master for resident runners (:mod:`indexing_task.resident`), which wait on a socket most of the
    time: the jobs keep one slot per core, and plan for that many (``spark.default.parallelism``).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    local = re.fullmatch(r"local\[(\*|\d+)\]", master)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if local and resident_slots:
        cores = (os.cpu_count() or 1) if local.group(1) == "*" else int(local.group(1))
        master = f"local[{cores + resident_slots}]"
        conf = {"spark.default.parallelism": str(cores), **(conf or {})}
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.python.worker.reuse", "true")
        .config("spark.task.maxFailures", "2")
        .config("spark.driver.extraJavaOptions", "-Dlog4j.rootLogger=WARN")
        .config("spark.scheduler.mode", "FAIR")
        .config("spark.scheduler.allocation.file", _pools_file())
    )
    for name in (*DEEP_STORAGE_ENV, SAFE_PATH):
        if name in os.environ:
            builder = builder.config(f"spark.executorEnv.{name}", os.environ[name])
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
