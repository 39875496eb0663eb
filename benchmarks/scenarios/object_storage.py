"""Queries on object storage: the query benchmark's data on S3 behind a per-request latency against the
same data on local disk; then many dashboard users at once while a supervisor ingests.

S3 is moto's server behind :class:`benchmarks.latency_proxy.LatencyProxy`, which adds ``--latency-ms``
to every request (a real object store's 20-100 ms) and counts them. One run:

1. **Queries.** The query benchmark's ``--rows`` (its four queries, its 24 hours x 100 small
   segments) written twice, to local deep storage and to S3. Each query ``--runs`` times on
   local deep storage, on S3 with a warm segment cache, and (``--baseline-runs``) on S3 without
   one (Spark reading the object store, what every query paid before the cache): p50/p95, GET
   requests and bytes downloaded per query, answers compared (DuckDB and Spark, S3 and local).
   Then the first query after a publish (its GETs), compaction of both copies (a second cache
   bounded at ``--bound-fraction`` of the data watches its bound throughout), the same queries again.
2. **Dashboard.** An overlord served over HTTP (its query engine process, deep storage on S3
   behind the proxy) ingests ``--rate`` events/s from a supervisor while ``--clients`` clients
   each refresh three panels over the last hour of the S3 data every ``--refresh-s`` for
   ``--dashboard-s``: per-panel p50/p95, waits for a turn, answers by status, ingestion
   freshness. A retention drop at the end empties both caches of the dropped segments.

    python -m benchmarks.scenarios.object_storage --rows 10000000
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import s3fs
import sqlalchemy as sa
import uvicorn

from benchmarks.latency_proxy import LatencyProxy
from benchmarks.results_file import parse_args, save_results
from benchmarks.scenarios.freshness import watch_commits
from benchmarks.scenarios.live_freshness import LiveProducer, live_freshness
from benchmarks.scenarios.query import DATASOURCE, QUERIES, START, build, same, segment_rows, spec
from benchmarks.suite import machine
from indexing_task.compaction_job import compact
from indexing_task.spark import get_spark
from overlord.config import Settings
from overlord.dev.sample_data import create_topic
from overlord.dev.stack import DevStack, dev_stack, free_port
from overlord.http.app import create_app
from overlord.query.engine import execute_sql
from overlord.query.local_engine import LocalEngine
from overlord.supervisor.manager import Overlord
from segment_store import (
    PublishRequest,
    SegmentDescriptor,
    committed_offsets,
    publish,
    upgrade_schema,
    visible_segments,
)
from segment_store.deep_storage import DeepStorage
from segment_store.lifecycle import mark_unused
from segment_store.segment_cache import SegmentCache, copy_name
from specs import load_example

S3_DS = "bench-s3"
BUCKET = "bench-segments"
LIVE = "live"
LOCAL_MAX = Settings.model_fields["query_local_max_bytes"].default


def on(datasource: str) -> dict[str, str]:
    """The query benchmark's queries over ``datasource``."""
    return {name: sql.replace(f'"{DATASOURCE}"', f'"{datasource}"') for name, sql in QUERIES.items()}


def panels(datasource: str, last_hour: datetime) -> dict[str, str]:
    """A dashboard's three panels over the last hour of ``datasource``'s data."""
    since = f"__time >= TIMESTAMP '{last_hour:%Y-%m-%d %H:%M:%S}'"
    return {"per_minute": f'SELECT TIME_FLOOR(__time, \'PT1M\') AS t, SUM("count") AS events FROM "{datasource}" '
                          f"WHERE {since} GROUP BY 1 ORDER BY 1",
            "top_countries": f'SELECT country, SUM("count") AS events FROM "{datasource}" WHERE {since} '
                             "GROUP BY country ORDER BY events DESC, country LIMIT 10",
            "filtered_count": f'SELECT COUNT(*) AS segments_rows, SUM("count") AS events FROM "{datasource}" '
                              f"WHERE {since} AND device = 'd1'"}


class BoundWatch(threading.Thread):
    """The most bytes of copies a cache directory held, sampled every 50 ms."""

    def __init__(self, directory: str) -> None:
        super().__init__(name="bound-watch", daemon=True)
        self.directory, self.most, self.stop = directory, 0, threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.05):
            self.most = max(self.most, disk_bytes(self.directory))


def disk_bytes(directory: str) -> int:
    """Bytes of the copies (and copies being written) in a cache directory."""
    total = 0
    for entry in os.scandir(directory):
        if entry.is_file() and ".parquet" in entry.name:
            try:
                total += entry.stat().st_size
            except FileNotFoundError:
                pass
    return total


def requests_of(proxy: LatencyProxy, run: Callable[[], Any]) -> tuple[Any, int, int]:
    """``run()``'s result and the GET requests and bytes it made through the proxy."""
    gets, downloaded = proxy.counts()
    result = run()
    after = proxy.counts()
    return result, after[0] - gets, after[1] - downloaded


def alternately(runs: int, *queries: Callable[[], Any]) -> list[tuple[Any, dict[str, Any]]]:
    """Each query's first result and the p50/p95 of ``runs`` more, the queries run in turn (the machine's load
    meets them alike).
    """
    results = [query() for query in queries]
    times: list[list[float]] = [[] for _ in queries]
    for _ in range(runs):
        for query, taken in zip(queries, times, strict=True):
            started = time.monotonic()
            query()
            taken.append(time.monotonic() - started)
    return [(result, {"p50_s": round(statistics.median(taken), 3),
                      "p95_s": round(sorted(taken)[min(len(taken) - 1, round(0.95 * (len(taken) - 1)))], 3),
                      "runs": runs}) for result, taken in zip(results, times, strict=True)]


def measure(spark: Any, engine: sa.Engine, proxy: LatencyProxy, local: LocalEngine, on_s3: LocalEngine,
            no_cache: LocalEngine, runs: int, baseline_runs: int) -> dict[str, Any]:
    figures = {}
    for name in QUERIES:
        here, there = on(DATASOURCE)[name], on(S3_DS)[name]
        gets, downloaded = proxy.counts()
        (local_result, local_s), (s3_result, s3_s) = alternately(
            runs, lambda sql=here: execute_sql(spark, engine, sql, local=local),
            lambda sql=there: execute_sql(spark, engine, sql, local=on_s3))
        gets, downloaded = proxy.counts()[0] - gets, proxy.counts()[1] - downloaded  # local deep storage makes none
        ((base_result, base_s),), base_gets, base_bytes = requests_of(proxy, lambda sql=there: alternately(
            baseline_runs, lambda: execute_sql(spark, engine, sql, local=no_cache)))
        spark_local = execute_sql(spark, engine, here).rows()
        figures[name] = {
            "local": local_s | {"engine": local_result.engine}, "s3_cached": s3_s | {"engine": s3_result.engine},
            "s3_uncached": base_s | {"engine": base_result.engine},
            "s3_cached_over_local_p50": round(s3_s["p50_s"] / local_s["p50_s"], 2),
            "s3_cached_over_local_p95": round(s3_s["p95_s"] / local_s["p95_s"], 2),
            "s3_uncached_over_local_p50": round(base_s["p50_s"] / local_s["p50_s"], 2),
            "gets_per_query_cached": round(gets / (runs + 1), 2), "bytes_per_query_cached": downloaded // (runs + 1),
            "gets_per_query_uncached": round(base_gets / (baseline_runs + 1), 1),
            "bytes_per_query_uncached": base_bytes // (baseline_runs + 1),
            "answers_identical": all(same({name: local_result.rows()}, {name: other}) for other in (
                s3_result.rows(), base_result.rows(), spark_local))}
        f = figures[name]
        print(f"  {name}: local ({local_result.engine}) p50 {local_s['p50_s']:.3f} p95 {local_s['p95_s']:.3f} | "
              f"S3 cached ({s3_result.engine}) p50 {s3_s['p50_s']:.3f} p95 {s3_s['p95_s']:.3f} "
              f"({f['s3_cached_over_local_p95']}x), {f['gets_per_query_cached']} GETs | S3 uncached "
              f"({base_result.engine}) p50 {base_s['p50_s']:.3f}, {f['gets_per_query_uncached']} GETs, "
              f"{f['bytes_per_query_uncached']:,} B | same answers {f['answers_identical']}", flush=True)
    return figures


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.1)


def cached_all(cache: SegmentCache, engine: sa.Engine) -> bool:
    return all(os.path.exists(os.path.join(cache.directory, copy_name(s.path)))
               for s in visible_segments(engine, S3_DS))


def publish_one(engine: sa.Engine, storage: DeepStorage, datasource: str, hour: int) -> int:
    """One more small segment of ``datasource`` (the same rows whatever the storage), as a task would publish it;
    its size.
    """
    start = START + timedelta(hours=hour)
    table = segment_rows(np.random.default_rng(99), 100, start)
    path = storage.path_for(datasource, start, start + timedelta(hours=1), "bench-late-task", 0)
    written = storage.write_table(path, table)
    segment = SegmentDescriptor(f"{datasource}_late", datasource, start, start + timedelta(hours=1), path,
                                written.size_bytes, table.num_rows,
                                {"checksum": written.checksum} if written.checksum else {})
    stored = committed_offsets(engine, datasource)
    at = stored.offsets[0] if stored is not None else 0
    outcome = publish(engine, PublishRequest(datasource, "bench-query", f"bench-late-{uuid.uuid4().hex[:6]}",
                                             {0: at}, {0: at + 1}, {0: 0}, (segment,)))
    if not outcome.ok:
        raise RuntimeError(outcome.message)
    return written.size_bytes


def dashboard(stack: DevStack, settings: Settings, engine: sa.Engine, spark: Any, clients: int, refresh_s: float,
              seconds: float, rate: int, expected: dict[str, list[list[Any]]], last_hour: datetime) -> dict[str, Any]:
    """The overlord over HTTP: a supervisor at ``rate``, ``clients`` dashboards refreshing every ``refresh_s``."""
    overlord = Overlord(settings, engine, spark)
    overlord.start()
    app = create_app(overlord, authenticator=None)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, name="http", daemon=True).start()
    url = f"http://127.0.0.1:{port}"
    app.state.queries.wait_started()
    http = httpx.Client(base_url=url, timeout=60)
    wait_for(lambda: engine_cache_full(http, engine), "the query engine's cache to hold the S3 datasource", 300)
    topic = f"live-{uuid.uuid4().hex[:6]}"
    create_topic(stack.bootstrap_servers, topic, 2)
    live_spec = load_example("events").to_druid_json()
    live_spec["spec"]["dataSchema"]["dataSource"] = LIVE
    live_spec["spec"]["ioConfig"]["topic"] = topic
    answer = http.post("/druid/indexer/v1/supervisor", json=live_spec)
    answer.raise_for_status()
    time.sleep(3)
    producer = LiveProducer(stack.bootstrap_servers, topic, 2, rate, seconds + 10, linger_ms=50)
    visible: dict[int, list[tuple[float, int]]] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=watch_commits, args=(engine, LIVE, visible, stop), daemon=True)
    watcher.start()
    producer.start()
    time.sleep(5)  # ingestion under way before the users arrive
    queries = panels(S3_DS, last_hour)
    answers: list[tuple[str, float, int, int, str, bool]] = []
    lock = threading.Lock()
    ends = time.monotonic() + seconds

    def user(index: int, panel: str) -> None:
        with httpx.Client(base_url=url, timeout=60) as client:
            next_at = time.monotonic() + refresh_s * index / clients
            while next_at < ends:
                time.sleep(max(0.0, next_at - time.monotonic()))
                started = time.monotonic()
                reply = client.post("/druid/v2/sql", json={"query": queries[panel], "resultFormat": "array"})
                took = time.monotonic() - started
                right = reply.status_code == 200 and reply.json() == expected[panel]
                with lock:
                    answers.append((panel, took, reply.status_code,
                                    int(reply.headers.get("X-Overlord-Query-Queue-Ms", 0)),
                                    reply.headers.get("X-Overlord-Query-Engine", "-"), right))
                next_at += refresh_s

    users = [threading.Thread(target=user, args=(i, panel), daemon=True) for i in range(clients) for panel in queries]
    for thread in users:
        thread.start()
    for thread in users:
        thread.join()
    wait_for(producer.finished.is_set, "the producer", 120)
    acked = [len(a) for a in producer.acked]
    wait_for(lambda: (stored := committed_offsets(engine, LIVE)) is not None and all(
        stored.offsets.get(p, 0) >= n for p, n in enumerate(acked)), "ingestion to catch up", 300)
    stop.set()
    watcher.join()
    total = http.post("/druid/v2/sql", json={"query": f'SELECT SUM("count") AS n FROM "{LIVE}"'}).json()[0]["n"]
    result = {"clients": clients, "panels": queries, "refresh_s": refresh_s, "seconds": seconds, "rate": rate,
              "per_panel": {}, "statuses": {}, "engines": {}, "events_sent": sum(acked), "events_counted": total,
              "exact": total == sum(acked), **live_freshness(producer.acked, visible)}
    for panel in queries:
        times = sorted(t for p, t, *_ in answers if p == panel)
        waits = sorted(w for p, _, _, w, *_ in answers if p == panel)
        result["per_panel"][panel] = {
            "answers": len(times), "p50_s": round(times[len(times) // 2], 3),
            "p95_s": round(times[int(0.95 * (len(times) - 1))], 3), "max_s": round(times[-1], 3),
            "queue_p95_ms": waits[int(0.95 * (len(waits) - 1))],
            "right_answers": sum(1 for p, *_, ok in answers if p == panel and ok)}
    for _, _, status, _, engine_name, _ in answers:
        result["statuses"][str(status)] = result["statuses"].get(str(status), 0) + 1
        result["engines"][engine_name] = result["engines"].get(engine_name, 0) + 1
    result["engine_cache"] = cache_metrics(http)
    print(f"dashboard: {clients} clients x {len(queries)} panels every {refresh_s:.0f} s for {seconds:.0f} s, "
          f"ingesting {rate}/s: " + " | ".join(f"{p} p50 {f['p50_s']:.3f} p95 {f['p95_s']:.3f}"
                                             for p, f in result["per_panel"].items())
          + f" | statuses {result['statuses']} | freshness p50 {result['freshness_p50_s']} "
          f"p95 {result['freshness_p95_s']} max {result['freshness_max_s']} | exact {result['exact']}", flush=True)
    result["overlord"] = (overlord, server, http, app.state.queries)
    return result


def cache_metrics(http: httpx.Client) -> dict[str, float]:
    return {line.split()[0].removeprefix("overlord_segment_cache_"): float(line.split()[1])
            for line in http.get("/metrics").text.splitlines()
            if line.startswith("overlord_segment_cache_") and "_created" not in line}


def _iso(value: Any) -> str:
    """A timestamp as the SQL endpoint writes it."""
    return value.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def engine_cache_full(http: httpx.Client, engine: sa.Engine) -> bool:
    return cache_metrics(http).get("files", -1) >= len(visible_segments(engine, S3_DS))


def run(rows: int, hours: int, tasks: int, runs: int, baseline_runs: int, latency_ms: float, clients: int,
        refresh_s: float, dashboard_s: float, rate: int, bound_fraction: float) -> dict[str, Any]:
    from moto.server import ThreadedMotoServer

    results: dict[str, Any] = {
        "benchmark": "object_storage", "started": datetime.now(UTC).isoformat(),
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
                    "load_avg_at_start": machine.load_average()},
        "object_store": f"moto's S3 server behind a proxy adding {latency_ms:g} ms to every request",
        "queries": QUERIES}
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's server logs every request
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    proxy = LatencyProxy(f"{host}:{port}")
    os.environ.pop("AWS_PROFILE", None)
    os.environ.update(AWS_ENDPOINT_URL=proxy.url, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                      AWS_DEFAULT_REGION="us-east-1")  # before Spark starts: its workers read S3 too
    workdir = Path(tempfile.mkdtemp(prefix="bench-object-storage-"))
    with dev_stack() as stack:
        engine = sa.create_engine(stack.database_url, pool_size=20)
        upgrade_schema(engine)
        s3fs.S3FileSystem(skip_instance_cache=True).mkdir(BUCKET)
        local_root, s3_root = stack.deep_storage, f"s3://{BUCKET}"
        started = time.monotonic()
        written = build(engine, DeepStorage(local_root), rows, hours, tasks)
        build(engine, DeepStorage(s3_root), rows, hours, tasks, S3_DS)
        data_bytes = sum(s.size_bytes for s in visible_segments(engine, S3_DS))
        results["data"] = {"rows": written, "segments": len(visible_segments(engine, S3_DS)), "bytes": data_bytes}
        print(f"built {written:,} rows twice (local, S3: {data_bytes:,} bytes) in {time.monotonic() - started:.0f} s",
              flush=True)
        proxy.latency_s = latency_ms / 1000
        settings = stack.settings(deep_storage=f"s3://{BUCKET}", segment_cache_dir=str(workdir / "engine-cache"),
                                  query_engine_eager=True, query_standby=False)
        spark = get_spark("local[*]", resident_slots=settings.resident_runner_count)
        cache = SegmentCache(str(workdir / "cache"), Settings.model_fields["segment_cache_max_bytes"].default)
        started, (gets, downloaded) = time.monotonic(), proxy.counts()
        cache.keep_in_sync(engine)
        wait_for(lambda: cached_all(cache, engine), "the cache to fill", 1_800)
        results["cache_fill"] = {"seconds": round(time.monotonic() - started, 1), "gets": proxy.counts()[0] - gets,
                                 "bytes": proxy.counts()[1] - downloaded}
        print(f"cache filled in {results['cache_fill']['seconds']} s", flush=True)
        local = LocalEngine(local_root, LOCAL_MAX)
        on_s3 = LocalEngine(s3_root, LOCAL_MAX, cache=cache)
        no_cache = LocalEngine(s3_root, LOCAL_MAX)  # no roots: every query to Spark, which reads S3
        print("before compaction:", flush=True)
        results["before"] = measure(spark, engine, proxy, local, on_s3, no_cache, runs, baseline_runs)

        publish_one(engine, DeepStorage(local_root), DATASOURCE, hours - 1)
        size = publish_one(engine, DeepStorage(s3_root), S3_DS, hours - 1)
        first, gets, downloaded = requests_of(proxy, lambda: execute_sql(spark, engine, on(S3_DS)["time_series"],
                                                                         local=on_s3))
        results["first_query_after_publish"] = {"gets": gets, "bytes": downloaded, "new_file_bytes": size,
                                                "engine": first.engine}
        print(f"first query after a publish: {gets} GET(s), {downloaded:,} bytes (the new file: {size:,})",
              flush=True)

        bounded = SegmentCache(str(workdir / "bounded"), int(bound_fraction * data_bytes))
        watch = BoundWatch(bounded.directory)
        watch.start()
        bounded.keep_in_sync(engine)
        started = time.monotonic()
        compact(spark, engine, spec(DATASOURCE), local_root)
        compact(spark, engine, spec(S3_DS), s3_root, segment_cache=cache.directory)
        results["compaction_s"] = round(time.monotonic() - started, 1)
        wait_for(lambda: cached_all(cache, engine), "the cache to hold the compacted segments", 600)
        wait_for(lambda: bounded.downloading == 0, "the bounded cache's downloads", 600)  # not counted as queries'

        print(f"compacted both in {results['compaction_s']} s; after compaction:", flush=True)
        results["after"] = measure(spark, engine, proxy, local, on_s3, no_cache, runs, baseline_runs)

        last_hour = START + timedelta(hours=hours - 1)
        expected = {name: json.loads(json.dumps(execute_sql(spark, engine, sql).rows(), default=_iso))
                    for name, sql in panels(DATASOURCE, last_hour).items()}
        board = dashboard(stack, settings, engine, spark, clients, refresh_s, dashboard_s, rate, expected, last_hour)
        overlord, server, http, query_engine = board.pop("overlord")
        results["dashboard"] = board

        dropped = [s.path for s in visible_segments(engine, S3_DS) if s.interval_start == START]
        mark_unused(engine, S3_DS, interval=(START, START + timedelta(hours=1)))
        directories = (cache.directory, bounded.directory, str(workdir / "engine-cache"))
        wait_for(lambda: not any(os.path.exists(os.path.join(d, copy_name(p))) for d in directories for p in dropped),
                 "the dropped segments' copies to go", 60)
        results["retention"] = {"segments_dropped": len(dropped), "copies_left": 0}
        watch.stop.set()
        watch.join()
        results["bound"] = {"max_bytes": bounded.max_bytes, "most_held": watch.most,
                            "within": watch.most <= bounded.max_bytes, "evictions": bounded.stats.evictions,
                            "downloads": bounded.stats.downloads}
        print(f"bounded cache: at most {watch.most:,} of {bounded.max_bytes:,} bytes through compaction, ingestion "
              f"and a retention drop ({bounded.stats.evictions} evictions)", flush=True)
        http.close()
        cache.close()
        bounded.close()
        server.should_exit = True
        query_engine.stop()
        overlord.stop()
        spark.stop()
        engine.dispose()
    proxy.stop()
    moto.stop()
    results["answers_identical"] = all(f["answers_identical"] for phase in ("before", "after")
                                       for f in results[phase].values())
    results["machine"]["load_avg_at_end"] = machine.load_average()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--tasks", type=int, default=100, help="segments per hour before compaction")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--baseline-runs", type=int, default=2,
                        help="runs of each query on S3 without a cache (after a first one)")
    parser.add_argument("--latency-ms", type=float, default=30.0, help="added to every request to S3")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--refresh-s", type=float, default=5.0)
    parser.add_argument("--dashboard-s", type=float, default=120.0)
    parser.add_argument("--rate", type=int, default=500, help="events/s the supervisor ingests meanwhile")
    parser.add_argument("--bound-fraction", type=float, default=0.5,
                        help="the bounded cache's size limit, as a fraction of the S3 data's bytes")
    parser.add_argument("--out", type=Path, default=Path("object_storage.json"),
                        help="a name under benchmarks/results, or a path")
    args = parse_args(parser, {"rows": 2_000, "hours": 2, "tasks": 3, "runs": 1, "baseline_runs": 1,
                               "latency_ms": 5.0, "clients": 2, "refresh_s": 2.0, "dashboard_s": 8.0, "rate": 50})
    save_results(run(args.rows, args.hours, args.tasks, args.runs, args.baseline_runs, args.latency_ms, args.clients,
                     args.refresh_s, args.dashboard_s, args.rate, args.bound_fraction), args.out, args.smoke)


if __name__ == "__main__":
    main()
