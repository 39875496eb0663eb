"""Live freshness benchmark: a long run sampled every ``--sample-s``, with auto-compaction or without.

A producer sends events stamped now at ``--rate``; every sample records the visible segments per
interval, the latency of a few queries through the SQL engine and an exactness check: the
datasource's ``SUM("count")`` and ``SUM(value_sum)`` against what its committed offsets cover, as
of one moment (offsets read before and after the query agree, else under the offsets row lock).

    python -m benchmarks.scenarios.live_freshness --auto-compaction --duration-s 600 --linger-ms 50
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import threading
import time
import uuid
from array import array
from collections import Counter
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import numpy as np
import sqlalchemy as sa
from confluent_kafka import Producer

from benchmarks.results_file import parse_args, save_results
from benchmarks.scenarios.freshness import watch_commits
from indexing_task.spark import get_spark
from overlord.coordinator.auto_compaction import CompactionConfig
from overlord.coordinator.duties import Coordinator
from overlord.dev.sample_data import create_topic
from overlord.dev.stack import dev_stack
from overlord.query.engine import execute_sql
from overlord.query.query_errors import QueryError
from overlord.supervisor.manager import Overlord
from segment_store import committed_offsets
from segment_store.records import lock_offsets_row
from segment_store.timeline import visible_segments
from specs import load_example

DS = "fresh"
COUNTRIES, DEVICES = ("DE", "FR", "US", "JP"), ("mobile", "desktop")
QUERIES = {  # {since}: five minutes before the sample
    "by_country": 'SELECT country, SUM("count") AS n FROM fresh GROUP BY country ORDER BY country',
    "last_5m": "SELECT COUNT(*) AS rows_, SUM(\"count\") AS n FROM fresh WHERE __time >= TIMESTAMP '{since}'",
    "per_minute": "SELECT TIME_FLOOR(__time, 'PT1M') AS m, SUM(\"count\") AS n FROM fresh GROUP BY 1 ORDER BY 1",
}
TOTALS = 'SELECT SUM("count") AS n, SUM(value_sum) AS v FROM fresh'


class LiveProducer(threading.Thread):
    """``rate`` events/s for ``seconds``; the k-th record of a partition has value k % 100.

    Events are stamped now, or up to ``late_s`` seconds earlier (uniformly): late data keeps
    landing in intervals compaction has already rewritten.

    Ack times are kept per partition, indexed by offset (that offset == k is checked: ``misordered``).
    """

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: int, seconds: float,
                 late_s: float = 0.0, linger_ms: int = 5) -> None:
        super().__init__(name="live-producer", daemon=True)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.rate, self.seconds, self.late_s, self.random = rate, seconds, late_s, random.Random(7)
        self.sent = [0] * partitions
        self.acked = [array("d") for _ in range(partitions)]
        self.linger_ms = linger_ms
        self.misordered = self.failed = self.queue_full = 0
        self.error: str | None = None
        self.finished = threading.Event()

    def run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": self.linger_ms})
        try:
            started, n = time.monotonic(), 0
            while (elapsed := time.monotonic() - started) < self.seconds:
                while n < int(elapsed * self.rate):
                    self._send(producer, n % self.partitions)
                    n += 1
                producer.poll(0.01)
            producer.flush(30)
            for p in range(self.partitions):  # a batch of its own at the end (see produce_steadily)
                self._send(producer, p)
                producer.flush(10)
        except Exception as exc:  # noqa: BLE001 - reported in the results, the run goes on to drain
            self.error = f"{type(exc).__name__}: {exc}"
            print(f"!!! producer stopped: {self.error}", flush=True)
            producer.flush(30)
        finally:
            self.finished.set()

    def _send(self, producer: Producer, p: int) -> None:
        k = self.sent[p]
        ts = datetime.now(UTC) - timedelta(seconds=self.random.uniform(0, self.late_s))
        event = {"ts": ts.isoformat().replace("+00:00", "Z"), "country": COUNTRIES[k % 4],
                 "device": DEVICES[k // 4 % 2], "value": k % 100, "price": 1.0}
        while True:
            try:
                producer.produce(self.topic, value=json.dumps(event).encode(), partition=p,
                                 on_delivery=partial(self._acked, k))
                break
            except BufferError:  # the broker is behind: wait for acknowledgements (the rate drops)
                self.queue_full += 1
                producer.poll(0.1)
        self.sent[p] += 1

    def _acked(self, k: int, error: Any, message: Any) -> None:
        if error is not None:
            self.failed += 1
            return
        times = self.acked[message.partition()]
        if message.offset() != k or len(times) != k:
            self.misordered += 1
        times.append(time.monotonic())


def value_sum(records: int) -> int:
    """The sum of k % 100 over the first ``records`` records of a partition."""
    r = records % 100
    return records // 100 * 4950 + r * (r - 1) // 2


def _totals(spark: Any, engine: sa.Engine) -> tuple[int, int]:
    try:
        n, v = execute_sql(spark, engine, TOTALS).rows()[0]
    except QueryError as exc:
        if exc.error_class != "TABLE_OR_VIEW_NOT_FOUND":
            raise
        n = v = None  # nothing published yet
    return int(n or 0), int(v or 0)


def check_exact(spark: Any, engine: sa.Engine, dropped: int, attempts: int = 2) -> dict[str, Any] | None:
    """The query's totals against the committed offsets of the same moment (None before any commit).

    Offsets read before and after the query agree (no publish in between), else the query runs
    holding the offsets row lock, which publishes and compaction swaps take too.
    """
    for attempt in range(1, attempts + 1):
        before = committed_offsets(engine, DS)
        if before is None:
            return None
        totals = _totals(spark, engine)
        after = committed_offsets(engine, DS)
        if after is not None and after.version == before.version:
            return _compare(before.offsets, totals, dropped, f"unlocked#{attempt}")
    with engine.begin() as conn:  # publishes and swaps of the datasource wait meanwhile
        locked = lock_offsets_row(conn, DS, topic=None)
        totals = _totals(spark, engine)
    return _compare(locked.offsets, totals, dropped, "locked")


def _compare(offsets: Mapping[int, int], totals: tuple[int, int], dropped: int, method: str) -> dict[str, Any]:
    # A fresh topic read from the earliest offsets: the committed offsets count the records. Every
    # event parses, so ``dropped`` (unparseable + thrown away) should be 0; value_sum is checked only then.
    want = (sum(offsets.values()) - dropped, sum(value_sum(o) for o in offsets.values()))
    ok = totals[0] == want[0] and (dropped > 0 or totals[1] == want[1])
    return {"ok": ok, "method": method, "count": totals[0], "expected_count": want[0], "value_sum": totals[1],
            "expected_value_sum": want[1], "offsets": {str(p): o for p, o in offsets.items()}}


def timed_queries(spark: Any, engine: sa.Engine, reps: int) -> dict[str, list[float]]:
    since = (datetime.now(UTC) - timedelta(minutes=5)).strftime("%Y-%m-%d %H:%M:%S")
    out: dict[str, list[float]] = {}
    for name, sql in QUERIES.items():
        out[name] = []
        for _ in range(reps):
            started = time.perf_counter()
            execute_sql(spark, engine, sql.format(since=since))
            out[name].append(round(time.perf_counter() - started, 3))
    return out


class SwapLog(logging.Handler):
    """The compaction swaps' outcomes, as they are logged."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.outcomes: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("compaction swap"):
            self.outcomes.append(record.getMessage())


def compaction_tasks(overlord: Overlord) -> list[Any]:
    return [t for t in overlord.store.tasks(datasource=DS, limit=100_000) if t.type == "compact"]


def take_sample(overlord: Overlord, spark: Any, engine: sa.Engine, started: float, reps: int) -> dict[str, Any]:
    sup, t = overlord.supervisors[DS], round(time.monotonic() - started, 1)
    per = Counter((s.interval_start, s.interval_end) for s in visible_segments(engine, DS))
    queries: dict[str, list[float]] = {}
    try:  # a query that fails (a file gone under a compaction, say) is a finding, not the end of the run
        exact = check_exact(spark, engine, sup.counters.unparseable + sup.counters.thrown_away)
        queries = timed_queries(spark, engine, reps) if per else {}
    except Exception as exc:  # noqa: BLE001
        exact = {"ok": False, "method": "error", "error": f"{type(exc).__name__}: {str(exc)[:500]}"}
    if exact is not None and not exact["ok"]:
        print(f"!!! EXACTNESS FAILURE: {json.dumps(exact)}", flush=True)
    compactions = Counter(t.status for t in compaction_tasks(overlord))
    return {"t": t, "took_s": round(time.monotonic() - started - t, 1), "at": datetime.now(UTC).isoformat(),
            "load1": os.getloadavg()[0], "intervals": len(per), "segments_total": sum(per.values()),
            "segments_max_per_interval": max(per.values(), default=0),
            "per_interval": {f"{s:%H:%M}-{e:%H:%M}": n for (s, e), n in sorted(per.items())},
            "queries_s": queries, "exact": exact, "compaction_tasks": dict(compactions)}


def _pct(values: list[float], q: float) -> float | None:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else None


def summarize(samples: list[dict[str, Any]], tasks: list[Any], swaps: list[str]) -> dict[str, Any]:
    minutes = []
    for m in sorted({int(s["t"] // 60) for s in samples}):
        chunk = [s for s in samples if int(s["t"] // 60) == m]
        lat = {q: [x for s in chunk for x in s["queries_s"].get(q, [])] for q in QUERIES}
        pooled = [x for xs in lat.values() for x in xs]
        minutes.append({"minute": m, "samples": len(chunk),
                        "max_segments_per_interval": max(s["segments_max_per_interval"] for s in chunk),
                        "max_visible_segments": max(s["segments_total"] for s in chunk),
                        "max_intervals": max(s["intervals"] for s in chunk),
                        "query_p50_s": _pct(pooled, 0.5), "query_p95_s": _pct(pooled, 0.95),
                        "query_p95_s_by_query": {q: _pct(xs, 0.95) for q, xs in lat.items()},
                        "load1_max": round(max(s["load1"] for s in chunk), 2)})
    checks = [s["exact"] for s in samples if s["exact"] is not None]
    ok_tasks = [t for t in tasks if t.status == "SUCCESS"]
    return {
        "by_minute": minutes,
        "exactness": {"checks": len(checks), "passed": sum(c["ok"] for c in checks),
                      "failed": sum(not c["ok"] for c in checks),
                      "methods": dict(Counter(c["method"].split("#")[0] for c in checks)),
                      "failures": [c for c in checks if not c["ok"]]},
        "compaction": {"tasks": len(tasks), "succeeded": len(ok_tasks),
                       "failed": [f"{t.id}: {t.status_detail}" for t in tasks if t.status == "FAILED"],
                       "intervals_compacted": sum((t.report or {}).get("intervals", 0) for t in ok_tasks),
                       "input_segments": sum((t.report or {}).get("inputSegments", 0) for t in ok_tasks),
                       "output_segments": sum((t.report or {}).get("outputSegments", 0) for t in ok_tasks),
                       "swaps": dict(Counter(m.split(":")[0].removeprefix("compaction swap ") for m in swaps)),
                       "swaps_with_appends_carried_over": sum(" 0 appended" not in m for m in swaps if " ok:" in m),
                       "runs": [{"created": t.created_at.isoformat(), "status": t.status, **(t.report or {})}
                                for t in sorted(tasks, key=lambda t: t.created_at)],
                       "swap_log": swaps},
    }


def live_freshness(acked: list[array], visible: dict[int, list[tuple[float, int]]]) -> dict[str, float]:
    parts: list[Any] = []
    prev: dict[int, int] = {}
    for p, times in enumerate(acked):
        acks = np.frombuffer(times, dtype=np.float64)
        for seen, committed in visible.get(p, []):
            parts.append(seen - acks[prev.get(p, 0):committed])
            prev[p] = committed
    lat = np.sort(np.concatenate(parts)) if parts else np.array([0.0])
    return {f"freshness_{k}_s": round(float(v), 3) for k, v in
            (("p50", lat[len(lat) // 2]), ("p95", lat[int(len(lat) * 0.95)]), ("max", lat[-1]))}


def print_table(samples: list[dict[str, Any]], header: bool = True) -> None:
    if header:
        print(f"{'t_s':>6} {'load1':>5} {'ivals':>5} {'seg/ival':>8} {'segs':>5} {'q_p50':>6} {'q_max':>6} "
              f"{'exact':>12} {'compactions':>11}")
    for s in samples:
        lat = sorted(x for xs in s["queries_s"].values() for x in xs)
        exact = "-" if s["exact"] is None else ("ok " if s["exact"]["ok"] else "FAIL ") + s["exact"]["method"]
        print(f"{s['t']:>6.0f} {s['load1']:>5.2f} {s['intervals']:>5} {s['segments_max_per_interval']:>8} "
              f"{s['segments_total']:>5} {_pct(lat, 0.5) or 0:>6.2f} {max(lat, default=0):>6.2f} {exact:>12} "
              f"{sum(s['compaction_tasks'].values()):>11}", flush=True)


def run_live(rate: int, duration_s: float, partitions: int, period: str | None, auto_compaction: bool,
             segment_granularity: str, skip_offset: str, compaction_period_s: int, sample_s: float,
             reps: int, late_s: float = 0.0, linger_ms: int = 5) -> dict[str, Any]:
    swaps = SwapLog()
    logging.getLogger("segment_store.compaction_swap").addHandler(swaps)
    logging.getLogger("segment_store.compaction_swap").setLevel(logging.INFO)
    with dev_stack() as stack:
        engine = sa.create_engine(stack.database_url)
        settings = stack.settings(compaction_period_s=compaction_period_s if auto_compaction else 0)
        spark = get_spark("local[*]", resident_slots=settings.resident_runner_count)  # else they hold every slot
        overlord = Overlord(settings, engine, spark)
        overlord.start()
        coordinator = Coordinator(overlord)
        coordinator.start()
        topic = f"fresh-{uuid.uuid4().hex[:8]}"
        create_topic(stack.bootstrap_servers, topic, partitions)
        spec = load_example("events").to_druid_json()
        spec["spec"]["dataSchema"]["dataSource"] = DS
        spec["spec"]["dataSchema"]["granularitySpec"]["segmentGranularity"] = segment_granularity
        spec["spec"]["ioConfig"]["topic"] = topic
        if period is None:
            spec["spec"]["ioConfig"].pop("period", None)
        else:
            spec["spec"]["ioConfig"]["period"] = period
        period_s = overlord.submit(spec).spec.io_config.period.total_seconds()
        config = CompactionConfig.model_validate({"dataSource": DS, "skipOffsetFromLatest": skip_offset})
        if auto_compaction:
            coordinator.set_compaction_config(config)
        time.sleep(3)
        producer = LiveProducer(stack.bootstrap_servers, topic, partitions, rate, duration_s, late_s, linger_ms)
        visible: dict[int, list[tuple[float, int]]] = {}
        stop = threading.Event()
        watcher = threading.Thread(target=watch_commits, args=(engine, DS, visible, stop))
        print(f"live: {rate}/s for {duration_s:.0f}s to {partitions} partitions, supervisor period {period_s:.0f}s, "
              f"segmentGranularity {segment_granularity}, auto-compaction "
              + (f"every {compaction_period_s}s, skipOffsetFromLatest {skip_offset}" if auto_compaction else "off"),
              flush=True)
        load_before = os.getloadavg()
        watcher.start()
        producer.start()
        started = next_at = time.monotonic()
        started_at = datetime.now(UTC).isoformat()
        samples: list[dict[str, Any]] = []
        drained = False
        while not drained:
            next_at += sample_s
            time.sleep(max(0.0, next_at - time.monotonic()))
            stored = committed_offsets(engine, DS)
            drained = (producer.finished.is_set() and stored is not None
                       and all(stored.offsets.get(p, 0) >= len(acks) for p, acks in enumerate(producer.acked)))
            timed_out = not drained and time.monotonic() - started > duration_s + 300
            if timed_out:
                print(f"!!! not drained 300 s after the producer stopped: committed {stored}, "
                      f"acked {[len(a) for a in producer.acked]}", flush=True)
            samples.append(take_sample(overlord, spark, engine, started, reps))
            drained = drained or timed_out
            print_table(samples[-1:], header=len(samples) == 1)
        stop.set()
        watcher.join()
        tasks = compaction_tasks(overlord)
        indexing = [t for t in overlord.store.tasks(datasource=DS, limit=100_000) if t.type != "compact"]
        coordinator.stop()
        overlord.stop()
        spark.stop()
    return {
        "benchmark": "freshness-live", "started": started_at, "rate_per_s": rate, "duration_s": duration_s,
        "partitions": partitions, "period_s": period_s, "segment_granularity": segment_granularity,
        "late_s": late_s, "linger_ms": linger_ms,
        "auto_compaction": config.to_druid_json() if auto_compaction else None,
        "compaction_period_s": compaction_period_s if auto_compaction else 0, "sample_s": sample_s,
        "query_reps": reps, "queries": QUERIES, "records": sum(producer.sent),
        "records_acked": sum(len(a) for a in producer.acked),
        "producer": {"misordered": producer.misordered, "failed": producer.failed,
                     "queue_full_waits": producer.queue_full, "error": producer.error},
        "drained": not timed_out,
        "load_avg_before": load_before, "load_avg_after": os.getloadavg(), "cpus": os.cpu_count(),
        "indexing_tasks": len(indexing), **live_freshness(producer.acked, visible),
        "summary": summarize(samples, tasks, swaps.outcomes), "samples": samples,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=5_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--period", help="supervisor period, e.g. PT5S (default: the spec default)")
    parser.add_argument("--duration-s", type=float, default=600, help="how long to run")
    parser.add_argument("--auto-compaction", action="store_true", help="with an auto-compaction config")
    parser.add_argument("--segment-granularity", default="MINUTE")
    parser.add_argument("--skip-offset", default="PT1M", help="the config's skipOffsetFromLatest")
    parser.add_argument("--compaction-period-s", type=int, default=30, help="OVERLORD_COMPACTION_PERIOD_S")
    parser.add_argument("--sample-s", type=float, default=30)
    parser.add_argument("--query-reps", type=int, default=3, help="runs of each query per sample")
    parser.add_argument("--late-s", type=float, default=0, help="stamp events up to this many seconds late")
    parser.add_argument("--linger-ms", type=int, default=50, help="the producer's linger.ms (the dev broker, Tansu "
                      "0.6 in memory, stalls after ~80k batches per partition: 50 keeps a 10-minute run under that)")
    parser.add_argument("--out", help="results file name under benchmarks/results, or a path")
    args = parse_args(parser, {"rate": 200, "period": "PT1S", "duration_s": 8, "sample_s": 3, "query_reps": 1,
                               "compaction_period_s": 2, "skip_offset": "PT1S"})
    results = run_live(args.rate, args.duration_s, args.partitions, args.period, args.auto_compaction,
                       args.segment_granularity, args.skip_offset, args.compaction_period_s, args.sample_s,
                       args.query_reps, args.late_s, args.linger_ms)
    save_results(results, args.out or ("freshness_autocompaction.json" if args.auto_compaction
                                       else "freshness_live.json"), args.smoke)
    summary = {k: v for k, v in results.items() if k not in ("samples", "queries")}
    print(json.dumps(summary, indent=2, default=str))


if __name__ == "__main__":
    main()
