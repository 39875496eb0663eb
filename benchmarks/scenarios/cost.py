"""Cost at a steady trickle: CPU of the whole overlord per minute, and freshness, at a given rate.

Runs ``--supervisors`` supervisors (the example ``events`` spec, 2 partitions each), each fed
``--rate`` events/s by a load process (a producer and a watcher of the committed offsets). A
sampling process reads, every 0.5 s after ``--warmup-s``, the CPU time of every process of the
overlord's tree: this process (the overlord and the Spark driver), the Spark JVM and the Python
workers; the broker, PostgreSQL and the load process are reported apart (the machine's other
tenants), the sampler left out.
Freshness is the time from a record's acknowledgement to the commit that makes it visible.

    python -m benchmarks.scenarios.cost --rate 500 --seconds 300
    python -m benchmarks.scenarios.cost --supervisors 20 --rate 500 --seconds 300

``--steps`` adds the overlord's main-process CPU per task by step (issue 51;
:mod:`benchmarks.step_window`) and a CPU-weighted profile of its threads, and keeps one run per
(supervisors, rate) in the results file (``--out``, default ``cost_steps.json``).
"""

from __future__ import annotations

import argparse
import bisect
import json
import multiprocessing
import os
import statistics
import threading
import time
import uuid
from collections import Counter, defaultdict
from datetime import UTC, datetime
from typing import Any

import psutil
import pyarrow.compute as pc
import pyarrow.parquet as pq
import sqlalchemy as sa
from confluent_kafka import Producer

from benchmarks.results_file import RESULTS, parse_args, save_results
from benchmarks.step_window import StepWindow
from indexing_task.spark import get_spark
from overlord.dev.sample_data import COUNTRIES, DEVICES, create_topic
from overlord.dev.stack import dev_stack
from overlord.supervisor.manager import Overlord
from segment_store import committed_offsets, visible_segments
from segment_store.schema import datasource_offsets
from specs import load_example

PARTITIONS = 2


def _kind(process: psutil.Process) -> str:
    """What a process of the measured tree is, by its name and command line."""
    try:
        name, line = process.name(), " ".join(process.cmdline())
    except psutil.Error:
        return "other"
    if name == "postgres":
        return "postgres"
    if "--listener-url" in line:  # the Tansu broker
        return "broker"
    if name == "java":
        return "spark_jvm"
    return "python_workers" if "pyspark" in line else "other"


class TreeCpu:
    """CPU seconds by kind of process: the overlord's tree plus the broker, PostgreSQL and the load."""

    def __init__(self, overlord_pid: int, exclude: set[int], postgres_port: int, load_pid: int | None = None) -> None:
        self.overlord, self.exclude, self.load_pid = psutil.Process(overlord_pid), exclude, load_pid
        self.postmaster = next(p for p in psutil.process_iter(["name", "cmdline"])
                               if p.info["name"] == "postgres" and f"-p {postgres_port}" in " ".join(p.info["cmdline"]))
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.kinds: dict[int, str] = {}

    def sample(self) -> None:
        tree = [self.overlord, *self.overlord.children(recursive=True),
                self.postmaster, *self.postmaster.children(recursive=True)]
        for process in tree:
            if process.pid in self.exclude:
                continue
            try:
                times = process.cpu_times()
            except psutil.Error:
                continue
            pid = process.pid
            if pid not in self.kinds:
                self.kinds[pid] = ("overlord" if pid == self.overlord.pid else "load" if pid == self.load_pid
                                   else _kind(process))
            self.first.setdefault(pid, times.user + times.system)
            self.last[pid] = times.user + times.system

    def seconds(self) -> dict[str, float]:
        """CPU seconds used between a process's first and last sample, by kind."""
        out: dict[str, float] = defaultdict(float)
        for pid, last in self.last.items():
            out[self.kinds[pid]] += last - self.first[pid]
        return dict(out)


def _sample(overlord_pid: int, load_pid: int, postgres_port: int, warmup_s: float, seconds: float,
            results: Any) -> None:
    """The sampling process (left out of the measured tree): CPU seconds by kind over the measured window."""
    cpu = TreeCpu(overlord_pid, {os.getpid()}, postgres_port, load_pid)
    time.sleep(warmup_s)
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        cpu.sample()
        time.sleep(0.5)
    cpu.sample()
    results.put((time.monotonic() - started, cpu.seconds()))


def _load(bootstrap: str, database_url: str, topics: dict[str, str], rate: int, warmup_s: float,
          seconds: float, results: Any, linger_ms: int = 5) -> None:
    """The load process: ``rate`` events/s to each topic; returns the freshness of the measured records.

    Runs longer than ~10 minutes need a ``linger_ms`` that keeps the embedded broker under ~80k record
    batches per partition (Tansu 0.6 stalls past that).
    """
    per_batch: list[float] = []  # records per produce batch, per topic and stats window (librdkafka's batchcnt)

    def on_stats(raw: str) -> None:
        per_batch.extend(t["batchcnt"]["avg"] for t in json.loads(raw)["topics"].values() if t["batchcnt"]["cnt"])

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": linger_ms, "statistics.interval.ms": 10_000,
                         "stats_cb": on_stats})
    acked: dict[tuple[str, int, int], float] = {}
    highest: dict[tuple[str, int], int] = {}
    """Each partition's next offset as acknowledged: the lag counts from it."""
    lag_by_minute: dict[int, int] = defaultdict(int)
    """The most records acknowledged and not yet committed, over all topics, in each measured minute."""
    measured_from = time.monotonic() + warmup_s

    def on_delivery(error: Any, message: Any) -> None:
        if error is None:
            key = (message.topic(), message.partition())
            highest[key] = max(highest.get(key, 0), message.offset() + 1)
            if time.monotonic() >= measured_from:
                acked[(message.topic(), message.partition(), message.offset())] = time.monotonic()

    visible: dict[tuple[str, int], list[tuple[float, int]]] = defaultdict(list)
    stop = threading.Event()
    engine = sa.create_engine(database_url)

    def watch() -> None:
        """Every 50 ms, every datasource's committed offsets in one query (not one per datasource)."""
        last: dict[tuple[str, int], int] = {}
        query = sa.select(datasource_offsets.c.datasource, datasource_offsets.c.offsets)
        while not stop.is_set():
            with engine.connect() as conn:
                rows = conn.execute(query).all()
            now = time.monotonic()
            for datasource, offsets in rows:
                topic = topics.get(datasource)
                for p, offset in (offsets.items() if topic else ()):
                    key = (topic, int(p))
                    if offset != last.get(key):
                        visible[key].append((now, offset))
                        last[key] = offset
            if now >= measured_from:
                minute = int((now - measured_from) // 60)
                lag = sum(max(0, high - last.get(key, 0)) for key, high in list(highest.items()))
                lag_by_minute[minute] = max(lag_by_minute[minute], lag)
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    started, sent = time.monotonic(), 0
    by_hour: Counter[str] = Counter()
    end = started + warmup_s + seconds
    while (now := time.monotonic()) < end:
        due = int((now - started) * rate)
        for _ in range(due - sent):
            ts = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
            by_hour[ts[:13]] += 1
            value = json.dumps({"ts": ts, "country": COUNTRIES[sent % len(COUNTRIES)],
                                "device": DEVICES[sent // 7 % len(DEVICES)], "value": sent % 1000,
                                "price": sent % 10_000 / 100}).encode()
            for topic in topics.values():
                while True:
                    try:
                        producer.produce(topic, value, partition=sent % PARTITIONS, on_delivery=on_delivery)
                        break
                    except BufferError:  # the client's queue is full: let the broker catch up
                        producer.poll(0.05)
            sent += 1
        producer.poll(0.01)
    producer.flush(30)
    for topic in topics.values():  # the broker's latest offset is the last batch's base + 1: end with a record
        for partition in range(PARTITIONS):
            producer.produce(topic, b'{"ts": "2026-01-01T00:00:00Z"}', partition=partition)
    producer.flush(10)
    wanted = {k: max(o for t, p, o in acked if (t, p) == k) for k in {(t, p) for t, p, _ in acked}}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and any(
            not visible[k] or visible[k][-1][1] <= offset for k, offset in wanted.items()):
        time.sleep(0.2)
    stop.set()
    watcher.join()
    by_minute: dict[int, list[float]] = defaultdict(list)
    committed = {key: [c for _, c in changes] for key, changes in visible.items()}  # rising (no resets here)
    for (topic, p, offset), at in acked.items():
        first = bisect.bisect_right(committed.get((topic, p), []), offset)  # the first commit past the record
        seen = visible[(topic, p)][first][0] if first < len(committed.get((topic, p), [])) else float("inf")
        by_minute[int((at - measured_from) // 60)].append(seen - at)
    latencies = sorted(x for minute in by_minute.values() for x in minute)
    per_second = Counter(int(at - measured_from) for at in acked.values())
    acks = sorted(per_second[s] for s in range(int(seconds)))  # a broker that stalls acknowledges in bursts
    results.put({"records_measured": len(latencies), "sent_per_topic": sent, "sent_by_hour": dict(by_hour),
                 "acked_per_s": {"p5": acks[len(acks) // 20], "p50": acks[len(acks) // 2], "max": acks[-1]},
                 "producer_records_per_batch": round(statistics.mean(per_batch), 2) if per_batch else None,
                 "freshness_p50_s": round(latencies[len(latencies) // 2], 3),
                 "freshness_p95_s": round(_p95(latencies), 3),
                 "freshness_max_s": round(latencies[-1], 3),
                 "freshness_p95_by_minute_s": [round(_p95(sorted(by_minute[m])), 3) for m in sorted(by_minute)],
                 "lag_max_by_minute_records": [lag_by_minute[m] for m in sorted(lag_by_minute) if m * 60 < seconds]})


def _p95(values: list[float]) -> float:
    return values[int(len(values) * 0.95)]


def run(supervisors: int, rate: int, seconds: float, warmup_s: float, resident_runners: int | None = None,
        linger_ms: int = 5, steps: bool = False) -> dict[str, Any]:
    started = datetime.now(UTC).isoformat()
    with dev_stack() as stack:
        engine = sa.create_engine(stack.database_url)
        settings = stack.settings(**({} if resident_runners is None else {"resident_runners": resident_runners}))
        spark = get_spark("local[*]", resident_slots=settings.resident_runner_count)
        overlord = Overlord(settings, engine, spark)
        overlord.start()
        topics = {}
        for i in range(supervisors):
            topic = topics[f"cost_{i}"] = f"cost-{i}-{uuid.uuid4().hex[:6]}"
            create_topic(stack.bootstrap_servers, topic, PARTITIONS)
            spec = load_example("events").to_druid_json()
            spec["spec"]["dataSchema"]["dataSource"] = f"cost_{i}"
            spec["spec"]["ioConfig"]["topic"] = topic
            overlord.submit(spec)
        time.sleep(3)  # the supervisors pin their initial offsets before the first record
        spawn = multiprocessing.get_context("spawn")
        results: Any = spawn.Queue()
        measured: Any = spawn.Queue()
        load = spawn.Process(target=_load, args=(stack.bootstrap_servers, stack.database_url, topics, rate, warmup_s,
                                                 seconds, results, linger_ms))
        load.start()
        postgres_port = int(stack.database_url.rsplit(":", 1)[1].split("/")[0])
        sampler = spawn.Process(target=_sample,
                                args=(os.getpid(), load.pid, postgres_port, warmup_s, seconds, measured))
        sampler.start()
        print(f"{supervisors} supervisor(s) at {rate} events/s each: {warmup_s:.0f} s warm-up, "
              f"{seconds:.0f} s measured")
        window = StepWindow() if steps else None
        if window is not None:  # the same window as the sampling process's, near enough
            time.sleep(warmup_s)
            window.start()
            time.sleep(seconds)
            window.stop()
        wall_s, used = measured.get(timeout=warmup_s + seconds + 120)
        freshness = results.get(timeout=300)
        freshness.pop("sent_by_hour")
        load.join(30)
        sampler.join(30)
        tasks = overlord.store.tasks(limit=100_000)
        exact = _exact(engine, overlord)
        overlord.stop()
        spark.stop()
    overlord_kinds = ("overlord", "spark_jvm", "python_workers", "other")
    cores = {kind: round(used.get(kind, 0.0) / wall_s, 3)
             for kind in (*overlord_kinds, "broker", "postgres", "load")}
    return {
        "benchmark": "cost", "started": started, "supervisors": supervisors,
        "resident_runners": settings.resident_runner_count,
        "overlord_env": {k: v for k, v in os.environ.items() if k.startswith("OVERLORD_")},
        "rate_per_s_each": rate, "partitions_each": PARTITIONS, "producer_linger_ms": linger_ms,
        "measured_s": round(wall_s, 1),
        "cores_overlord_tree": round(sum(cores[k] for k in overlord_kinds), 3),
        "cores_by_kind": cores,
        "cpu_seconds_per_minute_overlord_tree": round(60 * sum(cores[k] for k in overlord_kinds), 1),
        "tasks_per_s": round(sum(1 for t in tasks if t.finished_at) / (warmup_s + wall_s), 2),
        "task_medians": _task_times(tasks, 0.5),
        "task_p95": _task_times(tasks, 0.95),
        **freshness,
        "exact": exact,
        **({"control_plane": window.report()} if window is not None else {}),
    }


def _exact(engine: sa.Engine, overlord: Overlord) -> dict[str, Any]:
    """Whether every datasource's visible rows count exactly the records its committed offsets cover.

    Topics start empty and are pinned at 0, so the records read are the sum of the committed offsets, less
    those the supervisor counted as unparseable or thrown away.
    """
    wrong = []
    for sup in overlord.supervisors.values():
        datasource = sup.spec.datasource
        stored = committed_offsets(engine, datasource)
        read = sum(stored.offsets.values()) if stored is not None else 0
        dropped = sup.counters.unparseable + sup.counters.thrown_away
        rows = sum(int(pc.sum(pq.read_table(s.path, columns=["count"])["count"]).as_py() or 0)
                   for s in visible_segments(engine, datasource))
        if rows + dropped != read:
            wrong.append({"datasource": datasource, "rows": rows, "dropped": dropped, "committed": read})
    return {"ok": not wrong, "datasources": len(overlord.supervisors), "wrong": wrong[:10]}


def _with_earlier_runs(result: dict[str, Any], out: str) -> dict[str, Any]:
    """``--steps``: the results file's runs of other (supervisors, rate) pairs, and this one."""
    path = RESULTS / out
    earlier = json.loads(path.read_text()).get("runs", []) if path.exists() else []
    key = (result["supervisors"], result["rate_per_s_each"])
    runs = [r for r in earlier if (r["supervisors"], r["rate_per_s_each"]) != key] + [result]
    return {"benchmark": "cost_steps", "runs": sorted(runs, key=lambda r: (r["supervisors"], r["rate_per_s_each"]))}


def _task_times(tasks: list[Any], quantile: float) -> dict[str, float]:
    """Where a published indexing task's time went, at a quantile of each: launch to end, indexing, publishing,
    the rest waiting (for a slot, a runner, the broker).
    """
    done = [t for t in tasks if t.type == "index_kafka" and t.status == "SUCCESS" and t.report and t.finished_at]
    if not done:
        return {}
    total = [(t.finished_at - t.created_at).total_seconds() for t in done]
    index, publish = ([float(t.report[key]) for t in done] for key in ("indexSeconds", "publishSeconds"))

    def at(values: Any) -> float:
        ranked = sorted(values)
        return round(ranked[min(len(ranked) - 1, int(len(ranked) * quantile))], 3)

    return {"records": at(t.report["records"] for t in done), "launch_to_end_s": at(total), "index_s": at(index),
            "publish_s": at(publish),
            "waiting_s": at(a - b - c for a, b, c in zip(total, index, publish, strict=True))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--supervisors", type=int, default=1)
    parser.add_argument("--rate", type=int, default=500, help="events/s per supervisor")
    parser.add_argument("--seconds", type=float, default=300, help="the measured window")
    parser.add_argument("--warmup-s", type=float, default=30)
    parser.add_argument("--resident-runners", type=int, help="OVERLORD_RESIDENT_RUNNERS (default: its default)")
    parser.add_argument("--linger-ms", type=int, default=5, help="the load's producer linger.ms (librdkafka's "
                        "default, 5, is what the embedded broker spends most on: ~0.75 core at 20 x 500 events/s)")
    parser.add_argument("--steps", action="store_true", help="also the main process's CPU per task by step, "
                        "and a profile of it (issue 51)")
    parser.add_argument("--out", help="results file name under benchmarks/results, or a path (default cost.json; "
                        "cost_steps.json with --steps)")
    args = parse_args(parser, {"supervisors": 1, "rate": 100, "seconds": 5, "warmup_s": 2})
    result = run(args.supervisors, args.rate, args.seconds, args.warmup_s, args.resident_runners, args.linger_ms,
                 args.steps)
    out = args.out or ("cost_steps.json" if args.steps else "cost.json")
    if args.steps and not args.smoke:
        result = _with_earlier_runs(result, out)
    save_results(result, out, args.smoke)


if __name__ == "__main__":
    main()
