"""Parse cost by input format: the same events as JSON, CSV, Avro and Protobuf values, through the worker's parse.

The benchmark shapes' events (see :mod:`benchmarks.suite.shapes`) are written as JSON, as CSV
lines of the same columns, as Avro datums of a schema of those columns (inline, and in
Confluent's wire format through a schema registry) and as Protobuf messages of a message of
those fields (through the registry); the registry is the tests' in-process one, written to by
confluent-kafka's own serializers, as production producers write. :class:`indexing_task.rollup.Rollup`
parses and rolls up each in the worker's batch size, in turn, and the CPU time per event is
reported (no broker: the parse pass alone; a schema is fetched once, before the clock starts).

    python -m benchmarks.scenarios.formats --events 1000000 --repeat 3
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fastavro
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from benchmarks.results_file import parse_args, save_results
from benchmarks.suite import machine
from benchmarks.suite.runs import spec_for
from benchmarks.suite.shapes import generate, shape_by_name
from indexing_task.rollup import Rollup
from indexing_task.rollup_schema import RollupSchema
from indexing_task.spark_worker import CHUNK_RECORDS
from specs import load_supervisor_spec
from specs.schema_registry import ALLOWED_REGISTRIES_VARIABLE
from tests.schema_registry import running_registry

_CONTEXT = SerializationContext("formats", MessageField.VALUE)


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


def as_registry_avro(events: list[bytes], schema: dict[str, Any], registry_url: str) -> list[bytes]:
    """Each event as confluent-kafka's AvroSerializer writes it (Confluent's wire format)."""
    serialize = AvroSerializer(SchemaRegistryClient({"url": registry_url}), json.dumps(schema))
    return [serialize(json.loads(event), _CONTEXT) for event in events]


def as_registry_protobuf(events: list[bytes], columns: list[str], registry_url: str) -> list[bytes]:
    """Each event as a Protobuf message of ``columns`` (``ts``/``value`` int64, the rest strings), as
    confluent-kafka's ProtobufSerializer writes it.
    """
    file = descriptor_pb2.FileDescriptorProto(name="event.proto", package="bench", syntax="proto3")
    message = file.message_type.add(name="Event")
    for number, column in enumerate(columns, start=1):
        message.field.add(name=column, number=number, label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
                          type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64 if column in ("ts", "value")
                          else descriptor_pb2.FieldDescriptorProto.TYPE_STRING)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    event_class = message_factory.GetMessageClass(pool.FindMessageTypeByName("bench.Event"))
    serialize = ProtobufSerializer(event_class, SchemaRegistryClient({"url": registry_url}),
                                   {"use.deprecated.format": False})
    return [serialize(event_class(**json.loads(event)), _CONTEXT) for event in events]


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
    with running_registry() as registry:
        os.environ[ALLOWED_REGISTRIES_VARIABLE] = registry.url
        return _run(shapes, events, repeat, registry.url)


def _run(shapes: list[str], events: int, repeat: int, registry_url: str) -> dict[str, Any]:
    out: dict[str, Any] = {"benchmark": "formats", "started": datetime.now(UTC).isoformat(), "events": events,
                           "repeat": repeat, "load_avg_at_start": machine.load_average(), "shapes": {}}
    registry_decoder = {"type": "schema_registry", "url": registry_url}
    for name in shapes:
        shape = shape_by_name(name)
        columns = ["ts", *shape.dimensions, "value"]
        json_values = generate(shape, events)
        avro_schema, avro_values = as_avro(json_values, columns)
        raw = spec_for("formats", "formats", shape.low, shape.high).to_druid_json()
        inputs = {"json": ({"type": "json"}, json_values), "csv": ({"type": "csv", "columns": columns}, as_csv(
            json_values, columns)), "avro": ({"type": "avro_stream", "avroBytesDecoder": {
                "type": "schema_inline", "schema": avro_schema}}, avro_values),
            "avro_registry": ({"type": "avro_stream", "avroBytesDecoder": registry_decoder},
                              as_registry_avro(json_values, avro_schema, registry_url)),
            "protobuf_registry": ({"type": "protobuf", "protoBytesDecoder": registry_decoder},
                                  as_registry_protobuf(json_values, columns, registry_url))}
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
        out["shapes"][name] = {"cpu_us_per_event": costs, **{f"{fmt}_over_json": round(med[fmt] / med["json"], 3)
                                                             for fmt in inputs if fmt != "json"}}
        print(f"[formats] {name}: JSON {med['json']:.2f} µs/event; " + ", ".join(
            f"{fmt} {med[fmt]:.2f} ({med[fmt] / med['json']:.2f}x)" for fmt in inputs if fmt != "json"), flush=True)
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
