"""CPU of the worker's side of one small task, in-process: records already read in, segment files out.

What a resident runner does for a quiet topic's task after its fetch
(:func:`indexing_task.spark_worker.index_splits` without the Kafka read): parse and roll up
``--records`` records, merge, cut them by segment interval, sort and write the zstd Parquet
files to a local deep storage. The records are stand-ins for Kafka messages (value, partition,
offset), so the broker and the consumer are left out. Each spec is timed ``--iterations`` times
after ``--warmup`` runs, one task after another on this thread (as a runner does: its DuckDB
database stays open), with ``time.process_time``:

- ``wikipedia``: Druid's tutorial spec (``specs/examples/wikipedia.json``: 19 dimensions, no rollup);
- ``events``: the cost benchmark's spec (``specs/examples/events.json``: rollup by minute).

    python -m benchmarks.scenarios.worker_cost
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import duckdb
import pyarrow as pa

from benchmarks.results_file import parse_args, save_results
from indexing_task.offset_ranges import Split
from indexing_task.rollup_schema import RollupSchema
from indexing_task.spark_worker import TaskPayload, _index_chunks
from specs import load_example

START = datetime(2026, 11, 1, 12, tzinfo=UTC)


class FakeMessage:
    """What the worker reads of a Kafka message: its value, partition, offset and topic."""

    def __init__(self, value: bytes, partition: int, offset: int) -> None:
        self._value, self._partition, self._offset = value, partition, offset

    def value(self) -> bytes:
        return self._value

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def topic(self) -> str:
        return "t"


def wikipedia_record(rng: random.Random, n: int) -> dict[str, Any]:
    """An edit as Druid's tutorial data has them (``wikiticker``'s fields)."""
    ts = START + timedelta(milliseconds=n * 137 + rng.randrange(100))
    return {"time": ts.isoformat().replace("+00:00", "Z"), "channel": rng.choice(["#en.wikipedia", "#fr.wikipedia"]),
            "cityName": rng.choice([None, "Tokyo", "Buenos Aires"]), "comment": f"edit {rng.randrange(1000)}",
            "countryIsoCode": rng.choice([None, "JP", "AR"]), "countryName": rng.choice([None, "Japan"]),
            "isAnonymous": rng.choice([True, False]), "isMinor": False, "isNew": rng.choice([True, False]),
            "isRobot": False, "isUnpatrolled": False, "metroCode": None, "namespace": "Main",
            "page": f"Page {rng.randrange(50)}", "regionIsoCode": None, "regionName": None,
            "user": f"user{rng.randrange(20)}", "added": rng.randrange(500), "deleted": rng.randrange(50),
            "delta": rng.randrange(-50, 500)}


def events_record(rng: random.Random, n: int) -> dict[str, Any]:
    """An event of the ``events`` example (the cost benchmark's load)."""
    ts = START + timedelta(milliseconds=n * 97 + rng.randrange(100))
    return {"ts": ts.isoformat().replace("+00:00", "Z"), "country": rng.choice(["DE", "FR", "GB", "US"]),
            "device": rng.choice(["desktop", "mobile"]), "value": rng.randint(-50, 1000),
            "price": round(rng.random() * 100, 2)}


RECORDS = {"wikipedia": wikipedia_record, "events": events_record}


def measure(name: str, records: int, iterations: int, warmup: int, root: str) -> dict[str, Any]:
    """CPU milliseconds per task of spec ``name`` over ``iterations`` tasks of ``records`` records."""
    spec = load_example(name)
    schema = RollupSchema.from_spec(spec.spec.data_schema, spec.spec.io_config.input_format)
    rng = random.Random(7)
    samples = []
    for i in range(warmup + iterations):
        messages = [FakeMessage(json.dumps(RECORDS[name](rng, n)).encode(), 0, i * records + n)
                    for n in range(records)]
        payload = TaskPayload(task_id=f"{name}-{i}", datasource=name, topic="t", consumer_config={},
                              rollup_schema=schema, deep_storage=root,
                              splits=(Split(index=0, partition=0, start=i * records, end=(i + 1) * records),))
        gc.disable()  # as the worker runs a task (spark_worker.cyclic_gc_paused)
        started = time.process_time()
        result = _index_chunks(payload, payload.splits, 0, [messages], {}, {})  # type: ignore[list-item]
        spent = time.process_time() - started
        gc.enable()
        assert result.records == records and result.unparseable == 0, result
        if i >= warmup:
            samples.append(spent * 1000)
    samples.sort()
    return {"records": records, "iterations": iterations, "rows_out": result.rows_out,
            "cpu_ms_mean": round(statistics.fmean(samples), 3), "cpu_ms_p50": round(statistics.median(samples), 3),
            "cpu_ms_p90": round(samples[int(len(samples) * 0.9)], 3), "cpu_ms_min": round(samples[0], 3)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=30)
    parser.add_argument("--iterations", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--specs", nargs="+", default=list(RECORDS), choices=list(RECORDS))
    parser.add_argument("--out", default="worker_cost.json")
    args = parse_args(parser, {"iterations": 5, "warmup": 1}, argv)
    with tempfile.TemporaryDirectory() as root:
        figures = {name: measure(name, args.records, args.iterations, args.warmup, root) for name in args.specs}
    for name, one in figures.items():
        print(f"{name}: {one['records']} records -> {one['rows_out']} rows: "
              f"{one['cpu_ms_p50']} ms p50, {one['cpu_ms_mean']} ms mean CPU a task")
    save_results({"measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
                  "versions": {"duckdb": duckdb.__version__, "pyarrow": pa.__version__},
                  "specs": figures}, args.out, args.smoke)


if __name__ == "__main__":
    main()
