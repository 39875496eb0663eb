"""Hostile load: a wrong-password flood and hostile SQL while a supervisor ingests a live topic.

Starts ``overlord serve`` with authentication on the embedded stack, a supervisor over a topic fed
at ``--rate`` events/s, and measures, before and during the attack: the records ingestion commits
per second (from the committed offsets in PostgreSQL) and the latency of a logged-in reader's
``GET /druid/indexer/v1/supervisor/{id}/status``. The attack: ``--clients`` unauthenticated
clients sending wrong passwords (:func:`benchmarks.scenarios.auth_flood.flood_in_background`) and
``--queries`` read-only clients each sending the issue's hostile queries one after another.
Prints and saves the figures, the hostile queries' answers by status and the query engine's restarts.

    python -m benchmarks.scenarios.hostile_load --clients 60 --queries 40 --seconds 30 --query-cpus 1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from benchmarks.results_file import parse_args, save_results
from benchmarks.scenarios.auth_flood import READER, WRITER, _wait_healthy, flood_in_background, summary, write_auth_file
from benchmarks.suite import machine

HOSTILE_QUERIES = [
    ("SELECT max(length(format_string(concat('%0', CAST(900000000 + id AS STRING), 'd'), id))) FROM range(2)", {}),
    ("SELECT length(format_string('%0900000000d', 1))", {"timeout": 5000}),
    ("SELECT length(replace(repeat('x', 10000), 'x', repeat('y', 10000)))", {}),
    ("SELECT length(regexp_replace(repeat('x', 10000), 'x', repeat('y', 10000)))", {}),
    ("SELECT length(string_agg(repeat('x', 1000), ',')) FROM range(100000)", {}),
    ("SELECT length(aggregate(sequence(1, 10000), '', (acc, x) -> concat(acc, repeat('z', 1000))))", {}),
    ("SELECT count(*) FROM range(1000000) a CROSS JOIN range(1000000) b WHERE a.id * 7 + b.id = 3",
     {"timeout": 5000}),
    ("SELECT aes_decrypt(unbase64('x'), 'k')", {}),
]
"""The security issue's reproductions (read-only SQL), each with its context."""


def _committed(engine: sa.Engine, datasource: str) -> int:
    from segment_store import committed_offsets

    stored = committed_offsets(engine, datasource)
    return sum(stored.offsets.values()) if stored is not None else 0


class _Sampler:
    """Every ``interval_s``: the committed total and a logged-in status request's latency, until stopped."""

    def __init__(self, url: str, supervisor: str, engine: sa.Engine, datasource: str) -> None:
        self.samples: list[tuple[float, int, float]] = []  # (time, committed, latency ms)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(url, supervisor, engine, datasource))
        self._thread.start()

    def _run(self, url: str, supervisor: str, engine: sa.Engine, datasource: str) -> None:
        with httpx.Client(base_url=url, timeout=60, auth=READER) as http:
            path = f"/druid/indexer/v1/supervisor/{supervisor}/status"
            http.get(path).raise_for_status()  # logs in once
            while not self._stop.is_set():
                started = time.perf_counter()
                http.get(path).raise_for_status()
                latency = (time.perf_counter() - started) * 1000
                self.samples.append((time.monotonic(), _committed(engine, datasource), latency))
                self._stop.wait(0.1)

    def window(self, start: float, end: float) -> dict[str, Any]:
        """Committed records/s and status latency in ``[start, end]``, with its 5 slowest requests (s after start)."""
        inside = [s for s in self.samples if start <= s[0] <= end]
        rate = (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0]) if len(inside) > 1 else 0.0
        slowest = sorted(inside, key=lambda s: -s[2])[:5]
        return {"committed_per_s": round(rate, 1), "status_latency": summary([s[2] for s in inside]),
                "slowest_ms_at_s": [[round(s[2], 1), round(s[0] - start, 1)] for s in slowest]}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


async def _hostile(url: str, clients: int, seconds: float) -> dict[str, int]:
    """``clients`` read-only clients each sending the hostile queries in turn for ``seconds``; answers by status."""
    answers: Counter[str] = Counter()
    deadline = time.monotonic() + seconds

    async def client(offset: int) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=180, auth=READER) as http:
            i = offset
            while time.monotonic() < deadline:
                query, context = HOSTILE_QUERIES[i % len(HOSTILE_QUERIES)]
                i += 1
                try:
                    answer = await http.post("/druid/v2/sql", json={"query": query, "context": context})
                    answers[str(answer.status_code)] += 1
                except httpx.HTTPError as exc:
                    answers[type(exc).__name__] += 1

    await asyncio.gather(*(client(i) for i in range(clients)))
    return dict(answers)


def _hostile_in_background(url: str, clients: int, seconds: float) -> subprocess.Popen[str]:
    """The hostile clients in a child process: their CPU and GIL are not the measuring thread's."""
    return subprocess.Popen([sys.executable, "-m", "benchmarks.scenarios.hostile_load", "--hostile-only", url,
                             "--queries", str(clients), "--seconds", str(seconds)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2],
                            preexec_fn=_attacker_priority)


def _attacker_priority() -> None:
    """With ``--remote-attackers``, the attacking processes yield the CPU: attackers on other machines."""
    if os.environ.get("HOSTILE_REMOTE_ATTACKERS") == "1":
        os.nice(19)


def run(clients: int, queries: int, seconds: float, baseline_s: float, rate: int) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient, NewTopic

    from overlord.dev.sample_data import produce_live
    from overlord.dev.stack import dev_stack, free_port
    from specs.loader import load_example

    with tempfile.TemporaryDirectory(prefix="bench-hostile-") as workdir, dev_stack() as stack:
        topic, datasource = f"hostile-{uuid.uuid4().hex[:8]}", "hostile"
        admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
        for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
            future.result(timeout=10)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = {**os.environ, **stack.as_env(), "SPARK_LOCAL_IP": "127.0.0.1",
               "OVERLORD_AUTH_FILE": str(write_auth_file(Path(workdir) / "auth.json"))}
        log = Path(workdir) / "overlord.log"
        with log.open("wb") as out:
            server = subprocess.Popen([sys.executable, "-m", "overlord.cli", "serve", "--port", str(port)],
                                      env=env, stdout=out, stderr=subprocess.STDOUT)
        engine = sa.create_engine(stack.database_url)
        stop_producing = threading.Event()
        producer = threading.Thread(target=produce_live, args=(stack.bootstrap_servers, topic, 2, rate,
                                                                stop_producing))
        try:
            _wait_healthy(url, server, log)
            spec = load_example("events").to_druid_json()
            spec["spec"]["dataSchema"]["dataSource"] = datasource
            spec["spec"]["ioConfig"].update(topic=topic, period="PT1S", useEarliestOffset=True)
            httpx.post(f"{url}/druid/indexer/v1/supervisor", json=spec, auth=WRITER, timeout=60).raise_for_status()
            producer.start()
            deadline = time.monotonic() + 180
            while _committed(engine, datasource) == 0:  # the first task published: queries have data
                if time.monotonic() > deadline:
                    raise SystemExit(f"nothing committed within 180 s; see {log}:\n{log.read_text()[-3000:]}")
                time.sleep(0.5)
            sampler = _Sampler(url, datasource, engine, datasource)
            time.sleep(baseline_s)
            attack_start, attack_wall = time.monotonic(), time.time()
            with flood_in_background(url, clients=clients, seconds=seconds) as flood:
                hostile = _hostile_in_background(url, queries, seconds)
                out, err = hostile.communicate(timeout=seconds + 240)
                if hostile.returncode != 0:
                    raise RuntimeError(f"the hostile clients failed: {err[-2000:]}")
                answers = json.loads(out.strip().splitlines()[-1])
                flood_counts = flood.wait()
            attack_end = time.monotonic()
            time.sleep(baseline_s)
            sampler.stop()
            health = httpx.get(f"{url}/health", timeout=10)
            engine_events = _query_engine_events(log.read_text(errors="replace"), attack_wall)
            metrics = httpx.get(f"{url}/metrics", auth=READER, timeout=30).text
        finally:
            stop_producing.set()
            if producer.is_alive():
                producer.join(30)
            server.terminate()
            server.wait(90)
            engine.dispose()
    restarts = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                   if line.startswith("overlord_query_engine_restarts_total"))
    return {"scenario": "hostile_load", "machine": machine.info(), "load_avg_at_end": machine.load_average(),
            "rate_events_per_s": rate, "flood": flood_counts, "hostile_queries": {
                "clients": queries, "answers_by_status": answers, "query_engine_restarts": restarts},
            "before": sampler.window(attack_start - baseline_s, attack_start),
            "during_attack": sampler.window(attack_start, attack_end),
            "after": sampler.window(attack_end, attack_end + baseline_s),
            "health_after": [health.status_code, health.json()], "query_engine_events": engine_events}


def _query_engine_events(log: str, attack_wall: float) -> list[str]:
    """The overlord log's query engine kills and starts, each with its time in seconds after the attack began."""
    from datetime import datetime

    events = []
    for line in log.splitlines():
        if "query engine" in line and (" killed" in line or " started" in line):
            try:
                at = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").astimezone().timestamp() - attack_wall
            except ValueError:
                continue
            events.append(f"{at:+.1f} s: {line[24:200]}")
    return events


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scenarios.hostile_load")
    parser.add_argument("--clients", type=int, default=60, help="unauthenticated wrong-password clients")
    parser.add_argument("--queries", type=int, default=40, help="read-only clients sending hostile SQL")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--baseline-s", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=500, help="events/s produced to the supervisor's topic")
    parser.add_argument("--remote-attackers", action="store_true",
                        help="run the attacking processes at the lowest CPU priority, as if they ran elsewhere")
    parser.add_argument("--query-cpus", default=os.environ.get("OVERLORD_QUERY_CPUS"),
                        help="OVERLORD_QUERY_CPUS of the overlord, e.g. 1: the query engine's own CPUs")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--hostile-only", metavar="URL", help=argparse.SUPPRESS)  # the child sending hostile SQL
    args = parse_args(parser, {"clients": 4, "queries": 2, "seconds": 3.0, "baseline_s": 2.0, "rate": 100})
    if args.hostile_only:
        print(json.dumps(asyncio.run(_hostile(args.hostile_only, args.queries, args.seconds))))
        return 0
    if args.remote_attackers:
        os.environ["HOSTILE_REMOTE_ATTACKERS"] = "1"  # read by both attacking child processes
    if args.query_cpus:
        os.environ["OVERLORD_QUERY_CPUS"] = args.query_cpus  # the overlord's environment
    result = run(args.clients, args.queries, args.seconds, args.baseline_s, args.rate)
    result.update(remote_attackers=args.remote_attackers, query_cpus=args.query_cpus)
    save_results(result, args.out or ("hostile_load_remote_attackers.json" if args.remote_attackers
                                      else "hostile_load.json"), args.smoke)
    for phase in ("before", "during_attack", "after"):
        figures = result[phase]
        latency = figures["status_latency"]
        print(f"{phase:>13}: ingestion committed {figures['committed_per_s']:,} records/s; logged-in status "
              f"p50 {latency['p50_ms']} / p95 {latency['p95_ms']} / max {latency['max_ms']} ms "
              f"({latency['requests']} requests)")
        print(f"{'':>15}slowest (ms, s into the phase): {figures['slowest_ms_at_s']}")
    print(f"flood: {result['flood']['requests']:,} requests, statuses {result['flood']['statuses']}")
    print("query engine: " + "; ".join(result["query_engine_events"]))
    hostile = result["hostile_queries"]
    print(f"hostile queries from {hostile['clients']} clients: {hostile['answers_by_status']}; query engine "
          f"restarts {hostile['query_engine_restarts']:.0f}; /health after: {result['health_after']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
