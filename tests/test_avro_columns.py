"""Avro read as columns in one pass indexes exactly what the same records index as JSON, bad datums included.

Random plain record schemas (numbers, strings, booleans, enums, nullable fields, a nested record) and
random records: the Avro batch (read by :mod:`indexing_task.avro_columns`) and the JSON text of the same
records, parsed by the same spec, give the same rows; datums that do not decode among good ones fail
only themselves.
"""

from __future__ import annotations

import io
import json
import math
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexing_task.avro_columns import avro_columns
from indexing_task.rollup import Rollup
from indexing_task.rollup_schema import RollupSchema
from indexing_task.value_decoders import parse_input
from specs import load_supervisor_spec

pytestmark = pytest.mark.unit

_SCALARS = ["boolean", "int", "long", "float", "double", "string"]
_NUMBERS = {"int", "long", "float", "double"}


def _values(kind: Any) -> st.SearchStrategy[Any]:
    if isinstance(kind, list):
        return st.none() | _values(next(k for k in kind if k != "null"))
    if isinstance(kind, dict):
        if kind["type"] == "enum":
            return st.sampled_from(kind["symbols"])
        return st.fixed_dictionaries({f["name"]: _values(f["type"]) for f in kind["fields"]})
    return {"boolean": st.booleans(), "int": st.integers(-2**31, 2**31 - 1), "long": st.integers(-2**63, 2**63 - 1),
            "float": st.floats(width=32, allow_nan=False, allow_infinity=False),
            "double": st.floats(allow_nan=False, allow_infinity=False), "string": st.text(max_size=8)}[kind]


@st.composite
def _schemas(draw: st.DrawFn) -> dict[str, Any]:
    def field_type(i: int) -> Any:
        kind = draw(st.sampled_from([*_SCALARS, "nullable", "enum", "record"]))
        if kind == "nullable":
            return ["null", draw(st.sampled_from(_SCALARS))]
        if kind == "enum":
            return {"type": "enum", "name": f"E{i}", "symbols": ["A", "B", "C"]}
        if kind == "record":
            inner = draw(st.lists(st.sampled_from(_SCALARS), min_size=1, max_size=3))
            return {"type": "record", "name": f"R{i}", "fields": [{"name": f"x{j}", "type": k}
                                                                   for j, k in enumerate(inner)]}
        return kind
    count = draw(st.integers(1, 6))
    return {"type": "record", "name": "Event", "fields": [{"name": "ts", "type": "long"}] + [
        {"name": f"f{i}", "type": field_type(i)} for i in range(count)]}


def _spec(schema: dict[str, Any], input_format: dict[str, Any], discovery: str | None = None) -> RollupSchema:
    """String dimensions of every field (nested ones through the flattenSpec), sums of the numbers; or the
    dimensions ``discovery`` finds (``string`` or ``typed``).
    """
    dims, flatten, metrics = [], [], [{"type": "count", "name": "cnt"}]
    for field in schema["fields"][1:]:
        kind = field["type"]
        if isinstance(kind, dict) and kind["type"] == "record":
            for inner in kind["fields"]:
                name = f"{field['name']}_{inner['name']}"
                flatten.append({"type": "path", "name": name, "expr": f"$.{field['name']}.{inner['name']}"})
                dims.append(name)
            continue
        dims.append(field["name"])
        base = next((k for k in kind if k != "null"), None) if isinstance(kind, list) else kind
        if isinstance(base, str) and base in _NUMBERS:
            metrics.append({"type": "doubleSum", "name": f"sum_{field['name']}", "fieldName": field["name"]})
    spec = load_supervisor_spec({"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "events", "timestampSpec": {"column": "ts", "format": "millis"},
                       "dimensionsSpec": {"dimensions": dims} if discovery is None else {
                           "dimensions": [], "useSchemaDiscovery": discovery == "typed"}, "metricsSpec": metrics,
                       "granularitySpec": {"segmentGranularity": "DAY", "queryGranularity": "HOUR"}},
        "ioConfig": {"topic": "events", "inputFormat": {
            **input_format, **({"flattenSpec": {"fields": flatten}} if discovery is None else {})}}}})
    return RollupSchema.from_spec(spec.spec.data_schema, spec.spec.io_config.input_format)


def _datum(parsed: Any, record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, record)
    return out.getvalue()


def _outcome(schema: RollupSchema, values: list[bytes | None]) -> tuple[list[Any], list[tuple[int, str]]]:
    rollup = Rollup(schema)
    try:
        parsed = rollup.parse(values)
        rows = sorted(map(repr, rollup.merge([parsed.rows]).to_pylist()))
        return rows, [(bad.index, bad.reason) for bad in parsed.bad_samples]
    finally:
        rollup.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_avro_columns_index_what_the_same_records_index_as_json(data: st.DataObject) -> None:
    schema, discovery = data.draw(_schemas()), data.draw(st.sampled_from([None, "string", "typed"]))
    records = data.draw(st.lists(st.fixed_dictionaries({"ts": st.integers(0, 4 * 10**12), **{
        f["name"]: _values(f["type"]) for f in schema["fields"][1:]}}), min_size=1, max_size=30))
    parsed = fastavro.parse_schema(schema)
    datums = [_datum(parsed, r) for r in records]
    assert parse_input(json.dumps(_decoder(schema)), False, datums).typed is not None  # read as columns
    as_read = [fastavro.schemaless_reader(io.BytesIO(d), parsed, None) for d in datums]  # floats as float32 reads
    avro = _outcome(_spec(schema, {"type": "avro_stream", "avroBytesDecoder": {"type": "schema_inline",
                                                                                "schema": schema}}, discovery), datums)
    as_json = _outcome(_spec(schema, {"type": "json"}, discovery), [json.dumps(r).encode() for r in as_read])
    assert avro == as_json


def _decoder(schema: dict[str, Any]) -> dict[str, Any]:
    return {"format": "avro", "binaryAsString": False, "names": [],
            "decoder": {"type": "schema_inline", "schema": schema}}


SCHEMA = {"type": "record", "name": "Event", "fields": [
    {"name": "ts", "type": "long"}, {"name": "country", "type": "string"}, {"name": "amount", "type": "double"}]}


def test_datums_that_do_not_decode_fail_only_themselves_and_shift_nothing() -> None:
    """A truncated datum and an empty one among good ones (the one-pass read fails, each is read alone);
    a datum with bytes after it reads as its datum, as Druid's decoder reads it.
    """
    parsed = fastavro.parse_schema(SCHEMA)
    good = [_datum(parsed, {"ts": 3_600_000 * i, "country": c, "amount": float(i)})
            for i, c in enumerate(["DE", "FR", "DE", "IT"])]
    values: list[bytes | None] = [good[0], good[1][:-3], good[2] + b"\x02\x02", b"", good[3], None]
    schema = _spec(SCHEMA, {"type": "avro_stream", "avroBytesDecoder": {"type": "schema_inline", "schema": SCHEMA}})
    assert parse_input(schema.decoder, False, values).typed is None  # read value by value
    assert parse_input(schema.decoder, False, [good[0], good[2] + b"\x02\x02", good[3]]).typed is None
    rows, bad = _outcome(schema, values)
    expected, _ = _outcome(schema, [good[0], good[2], good[3]])
    assert rows == expected
    assert [i for i, _ in bad] == [1, 3, 5]


def test_non_finite_numbers_are_unreadable_in_both_reads() -> None:
    """JSON holds no NaN: a record holding one is unparseable whether the batch is read as columns or not."""
    parsed = fastavro.parse_schema(SCHEMA)
    values: list[bytes | None] = [_datum(parsed, {"ts": 0, "country": "DE", "amount": x}) for x in
                                  (1.0, math.nan, math.inf)]
    schema = _spec(SCHEMA, {"type": "avro_stream", "avroBytesDecoder": {"type": "schema_inline", "schema": SCHEMA}})
    assert parse_input(schema.decoder, False, values).typed is not None
    columns = _outcome(schema, values)
    by_value = _outcome(schema, [*values, b""])  # the empty datum sends the whole batch value by value
    assert columns[1] == [(1, "a NaN or infinite number"), (2, "a NaN or infinite number")]
    assert by_value == (columns[0], [*columns[1], (3, by_value[1][-1][1])])


def test_only_plain_record_schemas_are_read_as_columns() -> None:
    assert avro_columns(SCHEMA) is not None and avro_columns(_nested(8)) is not None
    for unplain in ({**SCHEMA, "fields": [{"name": "tags", "type": {"type": "array", "items": "string"}}]},
                    {**SCHEMA, "fields": [{"name": "raw", "type": "bytes"}]},
                    {**SCHEMA, "fields": [{"name": "u", "type": ["null", "long", "string"]}]},
                    {**SCHEMA, "fields": [{"name": "a", "type": "long"}, {"name": "A", "type": "long"}]},
                    _nested(12),
                    "string"):
        assert avro_columns(unplain) is None


def _nested(depth: int) -> dict[str, Any]:
    """A record of a record of ... ``depth`` levels."""
    inner: dict[str, Any] = {"type": "record", "name": f"L{depth}", "fields": [{"name": "x", "type": "long"}]}
    for level in range(depth - 1, 0, -1):
        inner = {"type": "record", "name": f"L{level}", "fields": [{"name": "x", "type": inner}]}
    return inner


HOSTILE = {"type": "record", "name": "Event", "fields": [
    {"name": "ts", "type": "long"}, {"name": "n", "type": "int"}, {"name": "flag", "type": ["null", "boolean"]},
    {"name": "c", "type": {"type": "enum", "name": "C", "symbols": ["A", "B"]}}]}


@pytest.mark.parametrize("datum", [
    b"\x00" + b"\x80\x80\x80\x80\x80\x01" + b"\x00" + b"\x00",  # an int varint past 32 bits (2^34)
    b"\x00" + b"\xfe\xff\xff\xff\x1f" + b"\x00" + b"\x00",  # 2^32 - 1: a 5-byte int
    b"\x00" + b"\x02" + b"\x02\x02" + b"\x00",  # a boolean byte of 2
    b"\x00" + b"\x02" + b"\x00" + b"\x80\x80\x80\x80\x20",  # an enum index of 2^32 (its low 32 bits: 0)
], ids=["int-past-32-bits", "int-2^32-1", "boolean-byte-2", "enum-index-2^32"])
def test_a_hostile_datum_reads_as_columns_what_it_reads_value_by_value_or_not_as_columns(datum: bytes) -> None:
    """The attack review's datums polars would have read otherwise than fastavro (32-bit ints, any nonzero
    boolean byte false, an enum index wrapped to 0): the one-pass read agrees, or leaves the batch to fastavro.
    """
    good = _datum(fastavro.parse_schema(HOSTILE), {"ts": 0, "n": 5, "flag": True, "c": "B"})
    decoder = json.dumps(_decoder(HOSTILE))
    columns = parse_input(decoder, False, [good, datum])
    by_value = parse_input(decoder, False, [good, datum], columnar=False)
    if columns.typed is not None:
        assert columns.problems is not None and by_value.problems is not None
        assert columns.problems.to_pylist() == by_value.problems.to_pylist()
        read = [json.loads(v) if v else None for v in by_value.values.to_pylist()]
        assert columns.typed.to_pylist() == [row if problem is None else None for row, problem in
                                             zip(read, by_value.problems.to_pylist(), strict=True)]
