"""Storage over a long run with default settings: files per interval, metadata rows, query latency, freshness.

Starts ``overlord serve`` on the embedded stack with every setting at its default (compaction on
by default, nothing configured), submits the example ``events`` spec with rollup off (every
event a row, as a raw-events datasource: files grow with the rate) and feeds it ``--rate``
events/s (the cost benchmark's load process, which also measures freshness). Every
``--sample-s`` it records, per interval, the visible segments, their average and median size
and whether the interval is settled (older than the default compaction lag); the segment rows
in PostgreSQL (used and unused); the bytes under deep storage; and the latency of a Druid SQL
query over the whole datasource. At the end it checks the query's total against what was sent,
then sets Druid's "keep the recent ones, drop the rest" rules (``loadByPeriod``, ``dropForever``,
the period reaching back to the start of the current hour: every older hour is dropped), times
how long the retention duty takes to drop them, checks the total again against what was sent
within the kept hour, and compares the deep-storage bytes with the
Parquet size of one compacted copy of the visible rows.

The datasource's Iceberg table (exported by default) is checked too: every ``--iceberg-every``-th
sample scans the current snapshot with pyiceberg (its own catalog client) and keeps its totals
per (hour, country, device) and the offsets its summary names; at the end the topic is read back
and each scan is compared, key by key, with one pass over the records below those offsets. Each
sample records the live snapshots and the files and bytes under the table's ``metadata/``.

    python -m benchmarks.scenarios.storage --rate 500 --minutes 60
"""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import fsspec
import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa
from confluent_kafka import Consumer, TopicPartition
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import NoSuchTableError

from benchmarks.results_file import parse_args, save_results
from benchmarks.scenarios.auth_flood import _wait_healthy
from benchmarks.scenarios.cost import PARTITIONS, _load
from overlord.coordinator.auto_compaction import DEFAULT_SKIP
from overlord.dev.sample_data import create_topic
from overlord.dev.stack import dev_stack, free_port
from segment_store import visible_by_interval, visible_segments
from segment_store.open_tables import NAMESPACE, OFFSETS_KEY
from segment_store.schema import segments as segments_t
from specs import load_example
from specs.durations import parse_iso_duration

DATASOURCE = "raw_events"
LINGER_MS = 100
"""The producer's linger: an hour at 500 events/s stays under the embedded broker's ~80k batches per partition."""


def _query_s(url: str) -> tuple[float, int]:
    """One Druid SQL query over the whole datasource: (seconds, its total event count)."""
    started = time.monotonic()
    answer = httpx.post(f"{url}/druid/v2/sql", timeout=120, json={
        "query": f'SELECT country, SUM("count") AS n, SUM(value_sum) AS v FROM "{DATASOURCE}" GROUP BY 1'})
    answer.raise_for_status()
    return time.monotonic() - started, sum(int(row["n"]) for row in answer.json())


def _timeline(engine: sa.Engine) -> list[dict[str, Any]]:
    """Per visible interval: segments, sizes, rows, and whether it is older than the default compaction lag."""
    chunks = visible_by_interval(visible_segments(engine, DATASOURCE))
    cutoff = max((end for _, end in chunks), default=None)
    out = []
    for (start, end), segments in chunks.items():
        sizes = [s.size_bytes for s in segments]
        out.append({"interval": f"{start.isoformat()}/{end.isoformat()}", "segments": len(segments),
                    "rows": sum(s.num_rows for s in segments), "bytes": sum(sizes),
                    "avg_bytes": round(statistics.mean(sizes)), "median_bytes": round(statistics.median(sizes)),
                    "settled": cutoff is not None and end <= cutoff - parse_iso_duration(DEFAULT_SKIP)})
    return out


def _sample(engine: sa.Engine, deep_storage: str, url: str, started: float) -> dict[str, Any]:
    s = segments_t.c
    with engine.connect() as conn:
        total, used = conn.execute(sa.select(sa.func.count(), sa.func.count().filter(s.used))
                                   .where(s.datasource == DATASOURCE)).one()
    fs, root = fsspec.core.url_to_fs(f"{deep_storage}/{DATASOURCE}")
    query_s, events = _query_s(url)
    return {"minute": round((time.monotonic() - started) / 60, 2), "query_s": round(query_s, 3),
            "events_visible": events, "segment_rows": total, "segment_rows_used": used,
            "deep_storage_bytes": fs.du(root) if fs.exists(root) else 0, "intervals": _timeline(engine)}


def _totals(rows: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    """Events and value sums per (hour, country, device, "n" | "v") of rows with ``__time`` as datetime."""
    out: Counter[tuple[Any, ...]] = Counter()
    for r in rows:
        key = (r["__time"].strftime("%Y-%m-%dT%H"), r["country"], r["device"])
        out[(*key, "n")] += r["count"]
        out[(*key, "v")] += r["value_sum"] or 0
    return out


def _iceberg_sample(database_url: str, deep_storage: str, scan: bool) -> dict[str, Any]:
    """The table's live snapshots and metadata size; with ``scan``, the current snapshot's offsets and totals."""
    try:
        table = load_catalog("overlord", type="sql", uri=database_url).load_table((NAMESPACE, DATASOURCE))
    except NoSuchTableError:
        return {"snapshots_live": 0}
    fs, root = fsspec.core.url_to_fs(f"{deep_storage}/{DATASOURCE}/metadata")
    listed = fs.find(root, detail=True)
    out: dict[str, Any] = {"snapshots_live": len(table.snapshots()), "metadata_files": len(listed),
                           "metadata_bytes": sum(int(i.get("size") or 0) for i in listed.values())}
    head = table.current_snapshot()
    if scan and head is not None and head.summary is not None:
        started = time.monotonic()
        rows = table.scan(snapshot_id=head.snapshot_id,
                          selected_fields=("__time", "country", "device", "count", "value_sum")).to_arrow()
        out |= {"snapshot_id": head.snapshot_id, "operation": head.summary.operation.value,
                "offsets": json.loads(head.summary[OFFSETS_KEY]), "scan_s": round(time.monotonic() - started, 2),
                "rows": rows.num_rows, "totals": _totals(rows.to_pylist())}
    return out


def _check_scans(bootstrap: str, topic: str, scans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each scan's totals against one pass over the topic's records below the offsets its snapshot names."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "storage-check", "enable.auto.commit": False})
    expected: Counter[tuple[Any, ...]] = Counter()
    read = dict.fromkeys(range(PARTITIONS), 0)
    checks = []
    for scan in sorted(scans, key=lambda s: sum(s["offsets"].values())):
        for p in range(PARTITIONS):
            want = scan["offsets"].get(str(p), 0)
            consumer.assign([TopicPartition(topic, p, read[p])])
            while read[p] < want:
                for message in consumer.consume(5000, 5.0):
                    if message.error() is None and read[p] <= message.offset() < want:
                        event = json.loads(message.value())
                        key = (event["ts"][:13], event.get("country"), event.get("device"))
                        expected[(*key, "n")] += 1
                        expected[(*key, "v")] += event.get("value") or 0
                        read[p] = message.offset() + 1
        wrong = sum(1 for k in expected.keys() | scan["totals"].keys() if expected[k] != scan["totals"][k])
        checks.append({"snapshot_id": scan["snapshot_id"], "operation": scan["operation"], "rows": scan["rows"],
                       "events": sum(n for k, n in expected.items() if k[-1] == "n"), "keys_wrong": wrong})
    consumer.close()
    return checks


def _compacted_copy_bytes(engine: sa.Engine) -> int:
    """The Parquet size of the visible rows written once, as the indexer writes them (zstd)."""
    tables = [pq.read_table(s.path) for s in visible_segments(engine, DATASOURCE)]
    out = io.BytesIO()
    if tables:
        pq.write_table(pa.concat_tables(tables, promote_options="default"), out, compression="zstd",
                       row_group_size=1_000_000)
    return out.tell()


def _summary(sample: dict[str, Any]) -> str:
    settled = [i for i in sample["intervals"] if i["settled"]]
    fresh = [i for i in sample["intervals"] if not i["settled"]]
    iceberg = sample.get("iceberg")  # not probed at the final samples
    tables = (f"iceberg {iceberg.get('snapshots_live', 0)} snapshots, {iceberg.get('metadata_files', 0)} metadata "
              "files; ") if iceberg is not None else ""
    return (f"minute {sample['minute']:6.1f}: query {sample['query_s']:.2f} s, rows {sample['segment_rows_used']} "
            f"used / {sample['segment_rows']}, {sample['deep_storage_bytes'] / 1e6:.1f} MB stored; {tables}"
            f"settled {[(i['segments'], round(i['avg_bytes'] / 1e6, 2)) for i in settled]} "
            f"fresh {[(i['segments'], round(i['avg_bytes'] / 1e6, 2)) for i in fresh]} (segments, avg MB)")


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]


def run(rate: int, minutes: float, sample_s: float, iceberg_every: int) -> dict[str, Any]:
    begun = datetime.now(UTC).isoformat()
    with dev_stack() as stack:
        engine = sa.create_engine(stack.database_url)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = Path(os.environ.get("TMPDIR", "/tmp")) / f"storage-overlord-{port}.log"
        env = {**os.environ, **stack.as_env(), "SPARK_LOCAL_IP": "127.0.0.1"}
        with log.open("wb") as out:
            server = subprocess.Popen([sys.executable, "-m", "overlord.cli", "serve", "--port", str(port),
                                       "--insecure-open"],  # loopback only
                                      env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            _wait_healthy(url, server, log)
            topic = f"storage-{uuid.uuid4().hex[:6]}"
            create_topic(stack.bootstrap_servers, topic, PARTITIONS)
            spec = load_example("events").to_druid_json()
            spec["spec"]["dataSchema"]["dataSource"] = DATASOURCE
            spec["spec"]["dataSchema"]["granularitySpec"]["rollup"] = False
            spec["spec"]["ioConfig"]["topic"] = topic
            httpx.post(f"{url}/druid/indexer/v1/supervisor", json=spec, timeout=30).raise_for_status()
            time.sleep(3)  # the supervisor pins its initial offsets before the first record
            spawn = multiprocessing.get_context("spawn")
            results: Any = spawn.Queue()
            load = spawn.Process(target=_load, args=(stack.bootstrap_servers, stack.database_url,
                                                     {DATASOURCE: topic}, rate, 0.0, minutes * 60, results,
                                                     LINGER_MS))
            load.start()
            print(f"{rate} events/s for {minutes} min, defaults; a sample every {sample_s:.0f} s", flush=True)
            started, samples, scans = time.monotonic(), [], []
            while load.is_alive() and results.empty():
                time.sleep(max(0.0, started + sample_s * (len(samples) + 1) - time.monotonic()))
                samples.append(_sample(engine, stack.deep_storage, url, started))
                iceberg = _iceberg_sample(stack.database_url, stack.deep_storage, len(samples) % iceberg_every == 0)
                if "totals" in iceberg:
                    scans.append(iceberg)
                samples[-1]["iceberg"] = {k: v for k, v in iceberg.items() if k != "totals"}
                print(_summary(samples[-1]), flush=True)
            freshness = results.get(timeout=600)
            load.join(30)
            sent_by_hour = freshness.pop("sent_by_hour")
            final = _sample(engine, stack.deep_storage, url, started)
            print(_summary(final), flush=True)
            sent = freshness["sent_per_topic"] + PARTITIONS  # the load ends each partition with one record
            exact_before = final["events_visible"] == sent

            now = datetime.now(UTC)
            horizon = now - timedelta(minutes=max(1, now.minute))  # at or after this hour's start
            keep = [{"type": "loadByPeriod", "period": f"PT{max(1, now.minute)}M"}, {"type": "dropForever"}]
            httpx.post(f"{url}/druid/coordinator/v1/rules/{DATASOURCE}", json=keep, timeout=30).raise_for_status()
            ruled = time.monotonic()
            kept_hours = {h for h in sent_by_hour if datetime.fromisoformat(h + ":00+00:00") + timedelta(hours=1)
                          > horizon}
            while any(s.interval_end <= horizon for s in visible_segments(engine, DATASOURCE)):
                if time.monotonic() - ruled > 180:
                    break
                time.sleep(1)
            dropped_after_s = round(time.monotonic() - ruled, 1)
            after_drop = _sample(engine, stack.deep_storage, url, started)
            print(_summary(after_drop), flush=True)
            kept = sum(n for h, n in sent_by_hour.items() if h in kept_hours)
            compacted_copy = _compacted_copy_bytes(engine)
            checks = _check_scans(stack.bootstrap_servers, topic, scans)
            print(f"iceberg: {len(checks)} snapshot scans checked, "
                  f"{sum(c['keys_wrong'] == 0 for c in checks)} exact", flush=True)
        finally:
            server.terminate()
            server.wait(120)
    queries = [s["query_s"] for s in samples]
    sixth = max(1, len(queries) // 6)
    return {
        "benchmark": "storage", "started": begun, "rate_per_s": rate, "minutes": minutes,
        "settings": "defaults (OVERLORD_* unset but the stack's addresses)", "spec": "events example, rollup off",
        "events_sent": sent, "exact_before_retention": exact_before,
        "final": final,
        "query_p50_s": round(statistics.median(queries), 3), "query_p95_s": round(_p95(queries), 3),
        "query_p95_by_sixth_s": [round(_p95(queries[i:i + sixth]), 3) for i in range(0, len(queries), sixth)],
        **freshness,
        "retention": {"rules": keep, "dropped_after_s": dropped_after_s, "kept_hours": sorted(kept_hours),
                      "events_expected": kept, "events_visible": after_drop["events_visible"],
                      "exact": after_drop["events_visible"] == kept, "after": after_drop},
        "compacted_copy_bytes": compacted_copy,
        "deep_storage_bytes_over_compacted_copy": round(after_drop["deep_storage_bytes"] / max(compacted_copy, 1), 2),
        "iceberg": {"scans_checked": len(checks), "scans_exact": sum(c["keys_wrong"] == 0 for c in checks),
                    "operations_scanned": dict(Counter(c["operation"] for c in checks)), "checks": checks,
                    "snapshots_live_max": max(s["iceberg"].get("snapshots_live", 0) for s in samples),
                    "metadata_files_max": max(s["iceberg"].get("metadata_files", 0) for s in samples),
                    "metadata_bytes_max": max(s["iceberg"].get("metadata_bytes", 0) for s in samples)},
        "samples": samples,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=500, help="events/s")
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--sample-s", type=float, default=30)
    parser.add_argument("--iceberg-every", type=int, default=4, help="scan the Iceberg table every n-th sample")
    parser.add_argument("--out", help="results file name under benchmarks/results, or a path "
                        "(default storage_{rate}.json)")
    args = parse_args(parser, {"rate": 100, "minutes": 0.25, "sample_s": 5, "iceberg_every": 1})
    save_results(run(args.rate, args.minutes, args.sample_s, args.iceberg_every),
                 args.out or f"storage_{args.rate}.json", args.smoke)


if __name__ == "__main__":
    main()
