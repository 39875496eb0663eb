"""Parse cost by input format: the same events as JSON, CSV and Avro values, through the worker's parse pass.

The benchmark shapes' events (see :mod:`benchmarks.suite.shapes`) are written as JSON, as CSV
lines of the same columns and as Avro datums of a schema of those columns;
:class:`indexing_task.rollup.Rollup` parses and rolls up each in the worker's batch size, in
turn, and the CPU time per event is reported (no broker: the parse pass alone).

    python -m benchmarks.scenarios.formats --events 1000000 --repeat 3
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fastavro

from benchmarks.results_file import parse_args, save_results
from benchmarks.suite import machine
from benchmarks.suite.runs import spec_for
from benchmarks.suite.shapes import generate, shape_by_name
from indexing_task.rollup import Rollup
from indexing_task.rollup_schema import RollupSchema
from indexing_task.spark_worker import CHUNK_RECORDS
from specs import load_supervisor_spec


def as_csv(events: list[bytes], columns: list[str]) -> list[bytes]:
    """Each JSON event as one CSV line of ``columns``."""
    out = []
    for event in events:
        line = io.StringIO()
        record = json.loads(event)
        csv.writer(line, lineterminator="").writerow([record[c] for c in columns])
        out.append(line.getvalue().encode())
    return out


def as_avro(events: list[bytes], columns: list[str]) -> tuple[dict[str, Any], list[bytes]]:
    """An Avro schema of ``columns`` (``ts``/``value`` longs, the rest strings) and each event as a datum of it."""
    schema = {"type": "record", "name": "Event", "fields": [
        {"name": c, "type": "long" if c in ("ts", "value") else "string"} for c in columns]}
    parsed = fastavro.parse_schema(schema)
    out = []
    for event in events:
        datum = io.BytesIO()
        fastavro.schemaless_writer(datum, parsed, json.loads(event))
        out.append(datum.getvalue())
    return schema, out


def parse_cost(schema: RollupSchema, values: list[bytes]) -> float:
    """CPU µs per event to parse and roll up ``values`` in the worker's batches."""
    rollup = Rollup(schema)
    started = time.process_time()
    partials = [rollup.parse(values[i:i + CHUNK_RECORDS]).rows for i in range(0, len(values), CHUNK_RECORDS)]
    rollup.merge(partials)
    cost = (time.process_time() - started) / len(values) * 1e6
    rollup.close()
    return cost


def run(shapes: list[str], events: int, repeat: int) -> dict[str, Any]:
    out: dict[str, Any] = {"benchmark": "formats", "started": datetime.now(UTC).isoformat(), "events": events,
                           "repeat": repeat, "load_avg_at_start": machine.load_average(), "shapes": {}}
    for name in shapes:
        shape = shape_by_name(name)
        columns = ["ts", *shape.dimensions, "value"]
        json_values = generate(shape, events)
        avro_schema, avro_values = as_avro(json_values, columns)
        raw = spec_for("formats", "formats", shape.low, shape.high).to_druid_json()
        inputs = {"json": ({"type": "json"}, json_values), "csv": ({"type": "csv", "columns": columns}, as_csv(
            json_values, columns)), "avro": ({"type": "avro_stream", "avroBytesDecoder": {
                "type": "schema_inline", "schema": avro_schema}}, avro_values)}
        schemas = {}
        for fmt, (input_format, _) in inputs.items():
            raw["spec"]["ioConfig"]["inputFormat"] = input_format
            spec = load_supervisor_spec(raw).spec
            schemas[fmt] = RollupSchema.from_spec(spec.data_schema, spec.io_config.input_format)
        costs: dict[str, list[float]] = {fmt: [] for fmt in inputs}
        for i in range(repeat + 1):  # the first round warms them up
            for fmt in (list(inputs) if i % 2 == 0 else list(reversed(inputs))):
                cost = parse_cost(schemas[fmt], inputs[fmt][1])
                if i:
                    costs[fmt].append(round(cost, 3))
        med = {fmt: statistics.median(c) for fmt, c in costs.items()}
        out["shapes"][name] = {"cpu_us_per_event": costs, "csv_over_json": round(med["csv"] / med["json"], 3),
                               "avro_over_json": round(med["avro"] / med["json"], 3)}
        print(f"[formats] {name}: JSON {med['json']:.2f}, CSV {med['csv']:.2f} ({med['csv'] / med['json']:.2f}x), "
              f"Avro {med['avro']:.2f} ({med['avro'] / med['json']:.2f}x) µs/event", flush=True)
    out["load_avg_at_end"] = machine.load_average()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=["1 low", "10 low + 1 high"])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("formats.json"),
                        help="a name under benchmarks/results, or a path")
    args = parse_args(parser, {"shapes": ["1 low"], "events": 2_000, "repeat": 1})
    save_results(run(args.shapes, args.events, args.repeat), args.out, args.smoke)


if __name__ == "__main__":
    main()
