"""The same topic indexed on Spark ``local[2]`` and on a standalone cluster (a master and two
one-core workers from ``spark-class``, on this machine), in one run.

Each engine runs in a process of its own (one SparkContext per process), indexes a 20k-event
warm-up topic, then the measured topic once, exactly as ``overlord index`` does, into its own
datasource; the peak memory of the Python workers that ran the task is sampled from ``/proc``.

    python -m benchmarks.scenarios.cluster --events 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.results_file import parse_args, save_results
from overlord.dev.sample_data import create_topic, make_sample_events, produce
from overlord.dev.spark_cluster import spark_cluster
from overlord.dev.stack import dev_stack

PARTITIONS = 4


def _python_worker_rss() -> dict[int, int]:
    """RSS in bytes of every ``pyspark.daemon``/``pyspark.worker`` process on this machine."""
    found: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if b"pyspark." not in (entry / "cmdline").read_bytes():
                continue
            pages = int((entry / "statm").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue
        found[int(entry.name)] = pages * os.sysconf("SC_PAGE_SIZE")
    return found


def run_one(master: str, topics: list[str]) -> dict[str, Any]:
    """In this process: index each topic once on ``master``; the figures of the last one."""
    from indexing_task.spark import get_spark
    from overlord.config import Settings
    from overlord.supervisor.task_ranges import index_once
    from segment_store import upgrade_schema
    from segment_store.database import metadata_engine
    from specs import load_example, load_supervisor_spec

    settings = Settings.from_env()
    spark = get_spark(master, settings.spark_conf)
    engine = metadata_engine(settings.database_url)
    upgrade_schema(engine)
    for topic in topics:
        raw = load_example("events").to_druid_json()
        raw["spec"]["dataSchema"]["dataSource"] = f"bench_{uuid.uuid4().hex[:8]}"
        raw["spec"]["ioConfig"]["topic"] = topic
        started = time.perf_counter()
        report = index_once(spark, engine, settings, load_supervisor_spec(raw))
        seconds = time.perf_counter() - started
        assert report.outcome.ok, report.outcome.message
    spark.stop()
    return {"master": master, "records": report.records, "seconds": round(seconds, 2),
            "records_per_s": round(report.records / seconds)}


def measure(master: str, topics: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run :func:`run_one` in a child process, sampling the Python workers' peak RSS meanwhile."""
    peak: dict[int, int] = {}
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.2):
            for pid, rss in _python_worker_rss().items():
                peak[pid] = max(peak.get(pid, 0), rss)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    child = subprocess.run([sys.executable, "-m", "benchmarks.scenarios.cluster", "--run", master, *topics],
                           env={**os.environ, **env}, capture_output=True, text=True, timeout=3600)
    done.set()
    sampler.join()
    if child.returncode != 0:
        raise RuntimeError(f"{master}: {child.stderr[-2000:]}")
    figures: dict[str, Any] = json.loads(child.stdout.strip().splitlines()[-1])
    figures["peak_python_worker_rss_mb"] = round(max(peak.values(), default=0) / 2**20)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scenarios.cluster")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--run", nargs="+", help=argparse.SUPPRESS)  # MASTER TOPIC...: the child's job
    parser.add_argument("--out", type=Path, default=Path("cluster.json"),
                        help="a name under benchmarks/results, or a path")
    args = parse_args(parser, {"events": 5_000})
    if args.run:
        print(json.dumps(run_one(args.run[0], args.run[1:])))
        return 0

    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as workdir, dev_stack() as stack:
        warm, topic = f"warm-{uuid.uuid4().hex[:6]}", f"bench-{uuid.uuid4().hex[:6]}"
        for name, n in ((warm, 20_000), (topic, args.events)):
            create_topic(stack.bootstrap_servers, name, PARTITIONS)
            produce(stack.bootstrap_servers, name, make_sample_events(n, bad_every=0).records, PARTITIONS)
        env = stack.as_env() | {"SPARK_LOCAL_IP": "127.0.0.1",
                                "OVERLORD_SPARK_CONF": json.dumps({"spark.driver.host": "127.0.0.1"})}
        runs = [measure("local[2]", [warm, topic], env)]
        with spark_cluster(Path(workdir) / "cluster", workers=2, cores=1, memory="2g") as cluster:
            runs.append(measure(cluster.master_url, [warm, topic], env) | {"master": "standalone, 2 workers x 1 core"})
    result = {"events": args.events, "partitions": PARTITIONS, "cores": os.cpu_count(),
              "load_average": os.getloadavg(), "runs": runs,
              "cluster_over_local": round(runs[1]["records_per_s"] / runs[0]["records_per_s"], 2)}
    save_results(result, args.out, args.smoke)
    for run in runs:
        print(f"{run['master']:>32}: {run['records']:,} records in {run['seconds']} s = "
              f"{run['records_per_s']:,}/s; peak Python worker RSS {run['peak_python_worker_rss_mb']} MB")
    print(f"cluster / local[2]: {result['cluster_over_local']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
