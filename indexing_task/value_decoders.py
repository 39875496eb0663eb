"""Avro and Protobuf record values, and JSON behind Confluent's framing, as the parse pass reads them.

A batch of plain Avro records is read as typed columns in one native pass (:mod:`indexing_task.avro_columns`);
any other batch is decoded value by value to JSON text. Avro is read as Druid reads it, without
logical-type conversions; Protobuf as Druid's converter reads it (:mod:`indexing_task.protobuf_values`),
bytes in base64. A value that does not decode, names a schema the registry does not have, or holds
what JSON cannot carry gets a reason, and the parse makes its record unparseable with it. A registry
that cannot answer fails the task (:class:`SchemaRegistryUnavailable`, :mod:`indexing_task.registry_schemas`):
nothing is published.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import Any, NamedTuple, Protocol

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from indexing_task.avro_columns import AvroColumns, ColumnsUnreadable, avro_columns
from indexing_task.protobuf_columns import ProtobufColumns
from indexing_task.protobuf_values import ProtobufReader, indexed_message, registry_files
from indexing_task.registry_schemas import RegistrySchemas, SchemaNotFound
from indexing_task.task_errors import SchemaRegistryUnavailable
from specs.avro import parse_avro_schema, refuse_recursion, without_logical_types
from specs.protobuf import descriptor_pool_of, find_message, parse_descriptor_set

__all__ = ["Decoded", "ParseInput", "parse_input", "value_decoder", "without_json_framing"]

Decoded = tuple[list[bytes | None], list[str | None]]
"""Each value as JSON text (None stays None; b"" where unreadable), and the reason for each unreadable one."""


class _Unreadable(Exception):
    """A value this service cannot read as Druid would, with the reason."""


def without_json_framing(values: pa.Array) -> pa.Array:
    """JSON values with Confluent's 5-byte prefix (a zero byte, a schema id) as the documents after it."""
    if not pc.any(pc.starts_with(values, pattern=b"\x00")).as_py():  # the usual batch: checked in one pass
        return values
    return pa.array([v[5:] if v is not None and v[:1] == b"\x00" else v for v in values.to_pylist()], pa.binary())


class ParseInput(NamedTuple):
    """A batch as the parse pass reads it."""

    values: pa.Array
    """JSON text (Avro and Protobuf decoded to it), CSV or TSV lines; with ``typed``, the values as they came."""
    problems: pa.Array | None
    """Why each unreadable value is (None if none can be)."""
    typed: pa.StructArray | None = None
    """Each readable value as a row of typed columns (null where unreadable), or None: read ``values``."""


def parse_input(decoder: str | None, delimited: bool, values: list[bytes | None], columnar: bool = True) -> ParseInput:
    """The values as the parse pass reads them.

    Avro and Protobuf decoded (``decoder``: a :attr:`RollupSchema.decoder`) to typed columns where the batch
    allows (``columnar``), else to JSON text; JSON with Confluent's wire-format prefix dropped; CSV and TSV
    lines (``delimited``) as they are.
    """
    raw = pa.array(values, type=pa.binary())
    if decoder is None:
        return ParseInput(raw if delimited else without_json_framing(raw), None)
    decode = value_decoder(decoder)
    typed = decode.columns(raw) if columnar else None
    if typed is not None:
        return ParseInput(raw, typed[1], typed[0])
    decoded, reasons = decode(values)
    return ParseInput(pa.array(decoded, type=pa.binary()), pa.array(reasons, type=pa.string()))


class _Reader(Protocol):
    """Decodes one value (a schema's datum or message); ``columns`` reads a batch of them at once, if it can."""

    @property
    def columns(self) -> AvroColumns | ProtobufColumns | None: ...

    def __call__(self, payload: bytes) -> Any: ...


Columns = tuple[pa.StructArray, pa.Array]
"""A batch as typed rows (null where unreadable), and why each unreadable value is."""

_NOT_FRAMED = "not in Confluent's wire format (magic byte, schema id, message indexes)"
_NON_FINITE = "a NaN or infinite number"


def _typed_rows(values: pa.Array, groups: list[tuple[pa.Array, AvroColumns | ProtobufColumns, int]],
                reasons: list[str | None]) -> Columns | None:
    """The batch's rows read by each group's reader (``(mask, reader, header length)``), in batch order.

    None if a group does not read, or the groups' rows have no common type (a field that changed type).
    """
    parts, where = [], []
    for mask, reader, header in groups:
        try:
            chosen = values if pc.all(mask).as_py() else values.filter(mask)  # the usual batch: one schema
            parts.append(reader.read(pc.binary_replace_slice(chosen, 0, header, b"") if header else chosen))
        except ColumnsUnreadable:
            return None
        where.append(np.flatnonzero(mask.to_numpy(zero_copy_only=False)))
    rows = _combined(parts)
    if rows is None:
        return None
    positions = np.concatenate(where)
    index = np.full(len(values), -1, np.int64)
    index[positions] = np.arange(len(rows))
    for at in positions[_non_finite(rows)]:  # as JSON cannot hold them, the value-by-value path refuses them
        reasons[at], index[at] = _NON_FINITE, -1
    in_order = len(rows) == len(values) and bool((index == np.arange(len(values))).all())  # the usual batch
    return rows if in_order else rows.take(pa.array(index, mask=index < 0)), pa.array(reasons, pa.string())


def _combined(parts: list[pa.StructArray]) -> pa.StructArray | None:
    """Rows of one or several schema versions as one array (fields a version lacks are null)."""
    if not parts:
        return None
    if all(p.type == parts[0].type for p in parts):
        return pa.concat_arrays(parts)
    try:
        table = pa.concat_tables([pa.Table.from_struct_array(p) for p in parts], promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    return table.to_struct_array().combine_chunks()


def _non_finite(rows: pa.StructArray) -> np.ndarray:
    """Which rows hold a NaN or an infinite number (at any depth)."""
    bad = np.zeros(len(rows), dtype=bool)
    for i, field in enumerate(rows.type):
        column = rows.field(i)
        if pa.types.is_floating(field.type):
            bad |= ~pc.fill_null(pc.is_finite(column), True).to_numpy(zero_copy_only=False)
        elif pa.types.is_struct(field.type):
            bad |= _non_finite(column)
    return bad


@lru_cache(maxsize=64)
def value_decoder(spec_json: str) -> _Fixed | _FromRegistry:
    """The decoder a task's values need (cached per process: registry schemas are fetched once)."""
    spec = json.loads(spec_json)
    binary_as_string = bool(spec.get("binaryAsString"))
    names = frozenset(spec.get("names", ()))
    decoder = spec["decoder"]
    if spec["format"] == "avro":
        text = _JsonText(binary_as_string, bytes_as_base64=False)
        if decoder["type"] == "schema_inline":
            return _Fixed(_AvroReader(parse_avro_schema(decoder["schema"]), avro_columns(
                without_logical_types(decoder["schema"]))), text, "an Avro value of the spec's schema")
        avro_registry = RegistrySchemas(decoder)
        return _FromRegistry(avro_registry, "AVRO", lambda schema: _avro_reader(schema, avro_registry), text)
    text = _JsonText(binary_as_string, bytes_as_base64=True)
    if decoder["type"] == "descriptor":
        files = parse_descriptor_set(base64.b64decode(decoder["descriptor"]))
        message = find_message(descriptor_pool_of(files), files, decoder.get("message"))
        return _Fixed(ProtobufReader(message, names), text, "a Protobuf message of the spec's type")
    registry = RegistrySchemas(decoder)
    return _FromRegistry(registry, "PROTOBUF", lambda schema: registry_files(
        schema, lambda subject, version: registry.version(subject, version, "PROTOBUF")), text,
                         lambda files, indexes: ProtobufReader(indexed_message(files, indexes), names))


class _JsonText:
    """Decoded data as compact JSON text, as Druid would read it."""

    def __init__(self, binary_as_string: bool, bytes_as_base64: bool) -> None:
        self._binary_as_string, self._base64 = binary_as_string, bytes_as_base64
        self._encoder = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=self._bytes)

    def encode(self, datum: Any) -> bytes:
        try:
            return self._encoder.encode(datum).encode()
        except ValueError:  # allow_nan=False
            raise _Unreadable("a NaN or infinite number") from None

    def _bytes(self, value: Any) -> str:
        if not isinstance(value, bytes):
            raise _Unreadable(f"a value JSON cannot hold ({type(value).__name__})")
        if self._binary_as_string:
            try:
                return value.decode()
            except UnicodeDecodeError:
                raise _Unreadable("a bytes or fixed value that is not UTF-8 text") from None
        if self._base64:
            return base64.b64encode(value).decode()
        raise _Unreadable("a bytes or fixed value (binaryAsString is false)")


def _each(values: Sequence[bytes | None], decode: Callable[[bytes], bytes]) -> Decoded:
    out: list[bytes | None] = []
    problems: list[str | None] = []
    for value in values:
        problem = None
        if value is None:
            out.append(None)
        else:
            try:
                out.append(decode(value))
            except _Unreadable as exc:
                problem = str(exc)
                out.append(b"")
        problems.append(problem)
    return out, problems


class _Fixed:
    """Every value is one datum of a schema the spec gives (no header)."""

    def __init__(self, reader: _Reader, text: _JsonText, what: str) -> None:
        self._reader, self._text, self._what = reader, text, what

    def columns(self, values: pa.Array) -> Columns | None:
        """The batch as typed columns, or None if it cannot be read so."""
        if self._reader.columns is None:
            return None
        return _typed_rows(values, [(pc.is_valid(values), self._reader.columns, 0)], [None] * len(values))

    def __call__(self, values: Sequence[bytes | None]) -> Decoded:
        def decode(value: bytes) -> bytes:
            try:
                datum = self._reader(value)
            except Exception as exc:  # noqa: BLE001 (any decoding failure is this record's, never the task's)
                raise _Unreadable(f"not {self._what} ({type(exc).__name__})") from None
            return self._text.encode(datum)
        return _each(values, decode)


MAX_MESSAGE_INDEXES = 64  # nesting of the message a Protobuf value names in its schema


def wire_header(value: bytes, protobuf: bool) -> tuple[int, list[int], int]:
    """Confluent's wire format: (schema id, message indexes, where the payload starts); ValueError if malformed.

    A zero byte, the id (4 bytes, big-endian), for Protobuf the indexes of the message in its file (a
    zigzag varint count, then each index; a count of 0 means ``[0]``). Read here with bounds (at most 10
    bytes a varint, 64 indexes, none negative): confluent-kafka's own parser takes seconds on a hostile value.
    """
    if len(value) < 5 or value[0] != 0:
        raise ValueError("no magic byte")
    schema_id, at = int.from_bytes(value[1:5], "big"), 5
    if not protobuf:
        return schema_id, [], at
    count, at = _zigzag(value, at)
    if not 0 <= count <= MAX_MESSAGE_INDEXES:
        raise ValueError("message index count")
    indexes = []
    for _ in range(count):
        index, at = _zigzag(value, at)
        if index < 0:
            raise ValueError("negative message index")
        indexes.append(index)
    return schema_id, indexes or [0], at


def _zigzag(value: bytes, at: int) -> tuple[int, int]:
    """The zigzag varint at ``at`` and where the next field starts."""
    result = 0
    for i, byte in enumerate(value[at:at + 10]):
        result |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), at + i + 1
    raise ValueError("varint")


class _FromRegistry:
    """Values in Confluent's wire format: each decoded with the registry's schema its header names."""

    def __init__(self, registry: RegistrySchemas, kind: str, load: Callable[[Any], Any], text: _JsonText,
                 reader_of: Callable[[Any, list[int]], _Reader] | None = None) -> None:
        self._registry, self._kind, self._load, self._text = registry, kind, load, text
        self._reader_of = reader_of or (lambda loaded, _indexes: loaded)
        self._readers: dict[tuple[int, tuple[int, ...]], _Reader] = {}

    def columns(self, values: pa.Array) -> Columns | None:
        """The batch as typed columns, or None if it cannot be read so.

        (A schema not plain, or a Protobuf message not the first of its file, is read value by value.)
        """
        header = 5 if self._kind == "AVRO" else 6  # Protobuf: then a zero, the indexes of the first message
        framed = pc.fill_null(pc.and_(pc.greater_equal(pc.binary_length(values), header),
                                      pc.starts_with(values, pattern=b"\x00")), False)
        reasons: list[str | None] = [None] * len(values)
        for at in np.flatnonzero(~framed.to_numpy(zero_copy_only=False) & pc.is_valid(values).to_numpy(
                zero_copy_only=False)):
            reasons[at] = _NOT_FRAMED
        headers, groups = pc.binary_slice(values, 0, header), []
        for prefix in pc.unique(headers.filter(framed)).to_pylist():
            if prefix[5:] not in (b"", b"\x00"):
                return None
            mask = pc.fill_null(pc.and_(framed, pc.equal(headers, prefix)), False)
            try:
                reader = self._reader(int.from_bytes(prefix[1:5], "big"), [0])
            except _Unreadable as exc:
                for at in np.flatnonzero(mask.to_numpy(zero_copy_only=False)):
                    reasons[at] = str(exc)
                continue
            if reader.columns is None:
                return None
            groups.append((mask, reader.columns, header))
        return _typed_rows(values, groups, reasons)

    def __call__(self, values: Sequence[bytes | None]) -> Decoded:
        return _each(values, self._decode)

    def _decode(self, value: bytes) -> bytes:
        try:
            schema_id, indexes, start = wire_header(value, protobuf=self._kind == "PROTOBUF")
        except ValueError:
            raise _Unreadable(_NOT_FRAMED) from None
        reader = self._reader(schema_id, indexes)
        try:
            datum = reader(value[start:])
        except Exception as exc:  # noqa: BLE001
            raise _Unreadable(f"not a value of schema id {schema_id} ({type(exc).__name__})") from None
        return self._text.encode(datum)

    def _reader(self, schema_id: int, indexes: list[int]) -> _Reader:
        """The reader of the registry's schema ``schema_id`` (its message at ``indexes``).

        _Unreadable if the registry does not have it or it cannot be used.
        """
        key = (schema_id, tuple(indexes))
        reader = self._readers.get(key)
        if reader is None:
            try:
                schema = self._registry.schema(schema_id, self._kind)
            except SchemaNotFound as exc:
                raise _Unreadable(str(exc)) from None
            try:
                reader = self._reader_of(self._load(schema), indexes)
            except SchemaRegistryUnavailable:
                raise
            except Exception as exc:  # noqa: BLE001 (a schema we cannot use fails its records, not the task)
                raise _Unreadable(f"schema id {schema_id} cannot be used: {exc}") from None
            if len(self._readers) >= self._registry.capacity:  # the spec's bound on the schemas kept
                self._readers.clear()
            self._readers[key] = reader
        return reader


# --- Avro ----------------------------------------------------------------------------------------


class _AvroReader:
    def __init__(self, schema: Any, columns: AvroColumns | None) -> None:
        self._schema, self.columns = schema, columns

    def __call__(self, payload: bytes) -> Any:
        return fastavro.schemaless_reader(io.BytesIO(payload), self._schema, None)


def _avro_reader(schema: Any, registry: RegistrySchemas) -> _AvroReader:
    """A reader of the registry's Avro ``schema``, its references (named types of other subjects) resolved."""
    named: dict[str, Any] = {}

    def add_references(references: Iterable[Any], depth: int = 0) -> None:
        if depth > 20:
            raise ValueError("references nested deeper than 20")
        for reference in references:
            referenced = registry.version(reference.subject, reference.version, "AVRO")
            add_references(referenced.references or (), depth + 1)
            fastavro.parse_schema(without_logical_types(refuse_recursion(json.loads(referenced.schema_str))), named)

    add_references(schema.references or ())
    plain = without_logical_types(refuse_recursion(json.loads(schema.schema_str)))
    return _AvroReader(fastavro.parse_schema(plain, named), None if schema.references else avro_columns(plain))
