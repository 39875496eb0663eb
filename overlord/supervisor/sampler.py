"""Druid's sampler: a few records of a spec's topic, parsed and rolled up as its tasks would, nothing committed.

``POST /druid/indexer/v1/sampler`` takes ``{"type": "kafka", "spec": {dataSchema, ioConfig, ...},
"samplerConfig": {"numRows": 200, "timeoutMs": 10000}}``. It reads up to ``numRows`` records
(and :data:`MAX_BYTES` of values), shared across the partitions (from the earliest offsets with
``useEarliestOffset``, else the latest records), with the same exact range reader and the same
parse as a task, and answers in
Druid's shape: ``data`` holds each record's ``input`` (its JSON object; ``raw`` text for any other
value) and the row it parses to on its own (``parsed``), or ``unparseable`` and its ``error``;
``rollup`` (ours) the rows a task would write for these records together. Nothing is committed
and no consumer group joins: the read is assign and poll, like a task's.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Consumer, Message
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from indexing_task.reader import consumer_config, read_range
from indexing_task.rollup import Rollup
from indexing_task.rollup_schema import TIME, RollupSchema
from indexing_task.spark_worker import record_metadata
from indexing_task.task_errors import IndexingError, RangeNotReadableError
from indexing_task.value_decoders import parse_input
from indexing_task.watermarks import stream_watermarks
from overlord.config import Settings
from overlord.supervisor.task_ranges import consumer_properties
from segment_store import Partition, kafka_partition
from specs import SupervisorSpec
from specs.loader import load_supervisor_spec, spec_error_from_validation
from specs.spec_errors import SpecError

__all__ = ["MAX_ROWS", "SamplerBusy", "SamplerConfig", "parse_request", "sample"]

MAX_ROWS = 5_000
"""The most records one sample reads (Druid's sampler has the same cap)."""

MAX_BYTES = 64 * 2**20
"""A sample stops reading once its records' values add up to this much: it is parsed in the API's process."""

MAX_SHOWN_BYTES = 8_192
"""A record's input is shown up to this many bytes (as raw text past it)."""

_running = threading.BoundedSemaphore(2)
"""Samples read and parse in the API's process: at most two at once."""


class SamplerBusy(RuntimeError):
    """Two samples already run."""


class SamplerConfig(BaseModel):
    """Druid's ``samplerConfig``."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    num_rows: int = Field(default=200, ge=1, le=MAX_ROWS, alias="numRows")
    timeout_ms: int = Field(default=10_000, ge=100, le=60_000, alias="timeoutMs")


def parse_request(body: object) -> tuple[SupervisorSpec, SamplerConfig]:
    """The spec and config of a sampler request; a :class:`SpecError` naming each bad path."""
    if not isinstance(body, Mapping):
        raise SpecError.at("$", 'expected a JSON object: {"type": "kafka", "spec": {...}, "samplerConfig": {...}}')
    if body.get("type", "kafka") != "kafka":
        raise SpecError.at("type", f"this overlord samples Kafka topics only (\"kafka\"), not {body.get('type')!r}")
    spec = load_supervisor_spec({"type": "kafka", "spec": body.get("spec")})
    try:
        config = SamplerConfig.model_validate(body.get("samplerConfig") or {})
    except ValidationError as exc:
        raise spec_error_from_validation(exc).prefixed("samplerConfig") from None
    return spec, config


def sample(spec: SupervisorSpec, settings: Settings, config: SamplerConfig) -> dict[str, Any]:
    """Read, parse and roll up a sample of ``spec``'s topic; Druid's sampler response (plus ``rollup``)."""
    if not _running.acquire(blocking=False):
        raise SamplerBusy("two samples are running; try again when one is done")
    try:
        return _parsed(spec, _read(spec, settings, config))
    finally:
        _running.release()


def _read(spec: SupervisorSpec, settings: Settings, config: SamplerConfig) -> list[Message]:
    io = spec.spec.io_config
    properties = consumer_properties(spec, settings)
    try:
        marks = stream_watermarks(properties, io, timeout_s=config.timeout_ms / 1000)
    except IndexingError as exc:
        raise SpecError.at("spec.ioConfig.topic", str(exc)) from None
    deadline = time.monotonic() + config.timeout_ms / 1000
    messages: list[Message] = []
    size = 0
    consumer = Consumer(consumer_config(properties, "overlord-sampler"))
    try:
        for partition, (start, end) in _ranges(marks, config.num_rows, io.use_earliest_offset).items():
            topic, number = kafka_partition(partition, io.topic)
            try:
                for batch in read_range(consumer, topic, number, start, end, max(0.1, deadline - time.monotonic())):
                    messages.extend(batch)
                    size += sum(len(m.value() or b"") for m in batch)
                    if size > MAX_BYTES:
                        return messages
            except RangeNotReadableError:
                pass  # out of time for this partition: the sample has what was read
            if time.monotonic() >= deadline:
                break
    finally:
        consumer.close()
    return messages


def _ranges(marks: Mapping[Partition, tuple[int, int]], rows: int, earliest: bool) -> dict[Partition, tuple[int, int]]:
    """``[start, end)`` per partition: ``rows`` shared out (the first partitions one more), first or latest records."""
    filled = [(p, low, high) for p, (low, high) in marks.items() if high > low]
    share, extra = divmod(rows, max(1, len(filled)))
    ranges = {}
    for i, (p, low, high) in enumerate(filled):
        n = share + (i < extra)
        ranges[p] = (low, min(high, low + n)) if earliest else (max(low, high - n), high)
    return ranges


def _parsed(spec: SupervisorSpec, messages: list[Message]) -> dict[str, Any]:
    schema = RollupSchema.from_spec(spec.spec.data_schema, spec.spec.io_config.input_format)
    values = [m.value() for m in messages]
    metadata = record_metadata(schema.metadata_needs, messages) if schema.metadata_needs else None
    each_rollup, together = Rollup(dataclasses.replace(schema, rollup=False)), Rollup(schema)
    try:
        each = each_rollup.parse_each(values, metadata)
        parsed = together.parse(values, metadata)
        rows = together.sort(parsed.rows.select(together.schema.output_columns))
        final = together.schema
    finally:
        each_rollup.close()
        together.close()
    data = []
    for message, shown, (row, reason) in zip(messages, _as_json(schema, values), each, strict=True):
        item: dict[str, Any] = {**_input(shown or message.value()), "partition": message.partition(),
                                "offset": message.offset()}
        if row is not None:
            item["parsed"] = _json_row(row)
        elif reason is not None:
            item.update(unparseable=True, error=reason)
        else:
            item["filtered"] = True  # thrown away by the transformSpec's filter
        data.append(item)
    dimensions = [{"type": d.type, "name": d.name} for d in final.dimensions]
    return {
        "numRowsRead": len(messages),
        "numRowsIndexed": sum(1 for row, _ in each if row is not None),
        "logicalDimensions": dimensions, "physicalDimensions": dimensions,
        "logicalSegmentSchema": [{"name": TIME, "type": "LONG"},
                                 *({"name": d.name, "type": d.type.upper()} for d in final.dimensions),
                                 *({"name": m.name, "type": "COMPLEX" if m.sketch else m.type.upper()}
                                   for m in final.metrics)],
        "data": data,
        "rollup": {"rollup": final.rollup, "rows": [_json_row(r) for r in rows.to_pylist()]},
    }


def _as_json(schema: RollupSchema, values: list[bytes | None]) -> list[bytes | None]:
    """The values as the parse reads them: Avro and Protobuf decoded, JSON's wire-format prefix dropped."""
    shown: list[bytes | None] = parse_input(schema.decoder, schema.delimited is not None, values,
                                                    columnar=False).values.to_pylist()
    return shown


def _input(value: bytes | None) -> dict[str, Any]:
    """A record's value as the sampler shows it: ``input``, its JSON object, else ``raw``, its text cut at a bound."""
    if value is None:
        return {"raw": None}
    if len(value) <= MAX_SHOWN_BYTES:
        try:
            decoded = json.loads(value)
            if isinstance(decoded, dict):
                return {"input": decoded}
        except ValueError:
            pass
    text = value[:MAX_SHOWN_BYTES].decode("utf-8", "replace")
    return {"raw": text + ("…" if len(value) > MAX_SHOWN_BYTES else "")}


def _json_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A parsed row in JSON: times as epoch milliseconds, first/last pairs as their value, sketches as base64."""
    def shown(value: Any) -> Any:
        if isinstance(value, datetime):
            return int(value.replace(tzinfo=value.tzinfo or UTC).timestamp() * 1000)
        if isinstance(value, bytes):
            return base64.b64encode(value).decode()
        if isinstance(value, dict) and "rhs" in value:
            return shown(value["rhs"])
        if isinstance(value, list):
            return [shown(v) for v in value]
        return value

    return {key: shown(value) for key, value in row.items()}
