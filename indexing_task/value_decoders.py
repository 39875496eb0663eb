"""Avro and Protobuf record values, and JSON behind Confluent's framing, as JSON text the parse pass reads.

Avro is read as Druid reads it, without logical-type conversions. Protobuf is read as Druid's
``ProtobufConverter`` reads it: the fields a message sets (a proto3 default is absent), under
their JSON names (``http_method`` is ``httpMethod``; also under the proto name where the spec
reads that name), enums by name, bytes in base64, 64-bit integers as numbers, Google's
``Timestamp``/``Duration``/``FieldMask`` as their JSON strings, wrappers and ``Struct``/``Value``
unwrapped. A value that does not decode, names a schema the registry does not have, or holds what
JSON cannot carry gets a reason, and the parse makes its record unparseable with it. A registry
that cannot answer fails the task (:class:`SchemaRegistryUnavailable`): nothing is published.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka.schema_registry import SchemaRegistryClient, SchemaRegistryError
from confluent_kafka.schema_registry.serde import SchemaId
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

from indexing_task.task_errors import SchemaRegistryUnavailable
from specs.avro import parse_avro_schema
from specs.protobuf import descriptor_pool_of, find_message, parse_descriptor_set

__all__ = ["Decoded", "value_decoder", "without_json_framing"]

Decoded = tuple[list[bytes | None], list[str | None]]
"""Each value as JSON text (None stays None; b"" where unreadable), and the reason for each unreadable one."""

MAX_REGISTRY_ANSWER_BYTES = 8 * 1024 * 1024  # a schema with its references; larger answers are refused


class _Unreadable(Exception):
    """A value this service cannot read as Druid would, with the reason."""


def without_json_framing(values: pa.Array) -> pa.Array:
    """JSON values with Confluent's 5-byte prefix (a zero byte, a schema id) as the documents after it."""
    framed = pc.equal(pc.binary_slice(values, 0, 1), b"\x00")
    return pc.if_else(framed, pc.binary_slice(values, 5), values) if pc.any(framed).as_py() else values


@lru_cache(maxsize=64)
def value_decoder(spec_json: str) -> Callable[[Sequence[bytes | None]], Decoded]:
    """The decoder a task's values need (cached per process: registry schemas are fetched once)."""
    spec = json.loads(spec_json)
    binary_as_string = bool(spec.get("binaryAsString"))
    names = frozenset(spec.get("names", ()))
    decoder = spec["decoder"]
    if spec["format"] == "avro":
        text = _JsonText(binary_as_string, bytes_as_base64=False)
        if decoder["type"] == "schema_inline":
            return _Fixed(_AvroReader(parse_avro_schema(decoder["schema"])), text, "an Avro value of the spec's schema")
        avro_registry = _Registry(decoder)
        return _FromRegistry(avro_registry, "AVRO", lambda schema: _avro_reader(schema, avro_registry), text)
    text = _JsonText(binary_as_string, bytes_as_base64=True)
    if decoder["type"] == "descriptor":
        files = parse_descriptor_set(base64.b64decode(decoder["descriptor"]))
        message = find_message(descriptor_pool_of(files), files, decoder.get("message"))
        return _Fixed(_ProtobufReader(message, names), text, "a Protobuf message of the spec's type")
    registry = _Registry(decoder)
    return _FromRegistry(registry, "PROTOBUF", lambda schema: _protobuf_files(schema, registry), text,
                         lambda files, indexes: _ProtobufReader(_indexed_message(files, indexes), names))


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

    def __init__(self, reader: Callable[[bytes], Any], text: _JsonText, what: str) -> None:
        self._reader, self._text, self._what = reader, text, what

    def __call__(self, values: Sequence[bytes | None]) -> Decoded:
        def decode(value: bytes) -> bytes:
            try:
                datum = self._reader(value)
            except Exception as exc:  # noqa: BLE001 (any decoding failure is this record's, never the task's)
                raise _Unreadable(f"not {self._what} ({type(exc).__name__})") from None
            return self._text.encode(datum)
        return _each(values, decode)


class _FromRegistry:
    """Values in Confluent's wire format: each decoded with the registry's schema its header names."""

    def __init__(self, registry: _Registry, kind: str, load: Callable[[Any], Any], text: _JsonText,
                 reader_of: Callable[[Any, list[int]], Callable[[bytes], Any]] | None = None) -> None:
        self._registry, self._kind, self._load, self._text = registry, kind, load, text
        self._reader_of = reader_of or (lambda loaded, _indexes: loaded)
        self._readers: dict[tuple[int, tuple[int, ...]], Callable[[bytes], Any]] = {}

    def __call__(self, values: Sequence[bytes | None]) -> Decoded:
        return _each(values, self._decode)

    def _decode(self, value: bytes) -> bytes:
        header = SchemaId(self._kind)
        try:
            payload = header.from_bytes(io.BytesIO(value))
        except Exception:  # noqa: BLE001 (a malformed header is this record's)
            raise _Unreadable("not in Confluent's wire format (magic byte, schema id)") from None
        if header.id is None:
            raise _Unreadable("a schema named by GUID (wire format v1), not by id")
        key = (header.id, tuple(header.message_indexes or ()))
        reader = self._readers.get(key)
        if reader is None:
            schema = self._registry.schema(header.id, self._kind)
            try:
                reader = self._reader_of(self._load(schema), header.message_indexes or [0])
            except SchemaRegistryUnavailable:
                raise
            except Exception as exc:  # noqa: BLE001 (a schema we cannot use fails its records, not the task)
                raise _Unreadable(f"schema id {header.id} cannot be used: {exc}") from None
            if len(self._readers) >= self._registry.capacity:  # the spec's bound on the schemas kept
                self._readers.clear()
            self._readers[key] = reader
        try:
            datum = reader(payload.read())
        except Exception as exc:  # noqa: BLE001
            raise _Unreadable(f"not a value of schema id {header.id} ({type(exc).__name__})") from None
        return self._text.encode(datum)


class _Registry:
    """A schema registry client (confluent-kafka's), its failures sorted into the record's and the task's."""

    def __init__(self, decoder: dict[str, Any]) -> None:
        """``decoder``: a ``SchemaRegistrySpec.task_json()`` (checked and resolved when the task was built)."""
        self.urls, self.capacity = decoder["urls"], decoder["capacity"]
        auth = {"basic.auth.user.info": decoder["userInfo"]} if decoder.get("userInfo") else {}
        self.client = SchemaRegistryClient({"url": ",".join(self.urls), **auth, "cache.capacity": decoder["capacity"],
                                            "timeout": 10, "max.retries": 2, "retries.wait.ms": 250})
        session = self.client._rest_client.session  # noqa: SLF001 (the client has no option for headers)
        session.headers.update(decoder["headers"])
        session.event_hooks["response"].append(_bounded)

    def schema(self, schema_id: int, kind: str) -> Any:
        """The registry's schema ``schema_id`` (cached by the client); unknown ids fail only their records."""
        try:
            return self.client.get_schema(schema_id, fmt="serialized" if kind == "PROTOBUF" else None)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                raise _Unreadable(f"schema id {schema_id} is not in the registry") from None
            raise SchemaRegistryUnavailable(f"schema registry {', '.join(self.urls)} answered "
                                            f"{exc.http_status_code}: {exc.error_message}") from None
        except Exception as exc:  # noqa: BLE001 (network errors of httpx and the like)
            raise SchemaRegistryUnavailable(f"schema registry {', '.join(self.urls)} is unreachable: "
                                            f"{type(exc).__name__}: {exc}") from None

    def version(self, subject: str, version: int, kind: str) -> Any:
        """A referenced schema (``subject``, ``version``)."""
        try:
            return self.client.get_version(subject, version, fmt="serialized" if kind == "PROTOBUF" else None).schema
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                raise ValueError(f"its reference {subject} version {version} is not in the registry") from None
            raise SchemaRegistryUnavailable(f"schema registry {', '.join(self.urls)} answered "
                                            f"{exc.http_status_code}: {exc.error_message}") from None


def _bounded(response: Any) -> None:
    length = response.headers.get("content-length")
    if length is not None and int(length) > MAX_REGISTRY_ANSWER_BYTES:
        raise SchemaRegistryUnavailable(f"schema registry answer of {int(length):,} bytes is larger than "
                                        f"{MAX_REGISTRY_ANSWER_BYTES:,}")


# --- Avro ----------------------------------------------------------------------------------------


class _AvroReader:
    def __init__(self, schema: Any) -> None:
        self._schema = schema

    def __call__(self, payload: bytes) -> Any:
        return fastavro.schemaless_reader(io.BytesIO(payload), self._schema, None)


def _avro_reader(schema: Any, registry: _Registry) -> _AvroReader:
    """A reader of the registry's Avro ``schema``, its references (named types of other subjects) resolved."""
    named: dict[str, Any] = {}

    def add_references(references: Iterable[Any], depth: int = 0) -> None:
        if depth > 20:
            raise ValueError("references nested deeper than 20")
        for reference in references:
            referenced = registry.version(reference.subject, reference.version, "AVRO")
            add_references(referenced.references or (), depth + 1)
            fastavro.parse_schema(_without_logical_types(json.loads(referenced.schema_str)), named)

    add_references(schema.references or ())
    return _AvroReader(fastavro.parse_schema(_without_logical_types(json.loads(schema.schema_str)), named))


def _without_logical_types(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {key: _without_logical_types(value) for key, value in schema.items() if key != "logicalType"}
    if isinstance(schema, list):
        return [_without_logical_types(item) for item in schema]
    return schema


# --- Protobuf ------------------------------------------------------------------------------------


def _protobuf_files(schema: Any, registry: _Registry) -> list[descriptor_pb2.FileDescriptorProto]:
    """The registry's Protobuf ``schema`` (serialized format) and every file it imports, the schema's last."""
    files: dict[str, descriptor_pb2.FileDescriptorProto] = {}

    def add(name: str, text: str, references: Iterable[Any], depth: int = 0) -> descriptor_pb2.FileDescriptorProto:
        if depth > 20:
            raise ValueError("imports nested deeper than 20")
        for reference in references:
            if reference.name not in files:
                referenced = registry.version(reference.subject, reference.version, "PROTOBUF")
                files[reference.name] = add(reference.name, referenced.schema_str, referenced.references or (),
                                            depth + 1)
        file = descriptor_pb2.FileDescriptorProto()
        file.ParseFromString(base64.b64decode(text))
        file.name = name
        return file

    main = add("__schema__.proto", schema.schema_str, schema.references or ())
    return [*files.values(), main]


def _indexed_message(files: list[descriptor_pb2.FileDescriptorProto], indexes: list[int]) -> Descriptor:
    """The message the header's indexes name in the schema's file (the last of ``files``)."""
    pool = descriptor_pool_of(files)
    file = files[-1]
    message = pool.FindFileByName(file.name).message_types_by_name[file.message_type[indexes[0]].name]
    for index in indexes[1:]:
        message = message.nested_types[index]
    return message


_SPECIAL = {
    **dict.fromkeys([f"google.protobuf.{w}Value" for w in ("Bool", "Int32", "UInt32", "Int64", "UInt64", "String",
                                                            "Bytes", "Float", "Double")],
                    lambda message: message.value),
    "google.protobuf.Timestamp": lambda message: message.ToJsonString(),
    "google.protobuf.Duration": lambda message: message.ToJsonString(),
    "google.protobuf.FieldMask": lambda message: message.ToJsonString(),
}


class _ProtobufReader:
    """Decodes one message type to the plain values Druid's converter makes of it."""

    def __init__(self, message: Descriptor, names: frozenset[str]) -> None:
        self._class = GetMessageClass(message)
        self._aliases = {f.name: f.json_name for f in message.fields if f.name != f.json_name and f.name in names}

    def __call__(self, payload: bytes) -> dict[str, Any]:
        message = self._class()
        message.ParseFromString(payload)
        converted: dict[str, Any] = _message(message)
        for name, json_name in self._aliases.items():
            if json_name in converted:
                converted[name] = converted[json_name]
        return converted


def _message(message: Message) -> Any:
    special = _SPECIAL.get(message.DESCRIPTOR.full_name)
    if special is not None:
        return special(message)
    if message.DESCRIPTOR.full_name == "google.protobuf.Struct":
        return {key: _struct_value(value) for key, value in message.fields.items()}
    if message.DESCRIPTOR.full_name == "google.protobuf.Value":
        return _struct_value(message)
    if message.DESCRIPTOR.full_name == "google.protobuf.ListValue":
        return [_struct_value(value) for value in message.values]
    return {field.json_name: _field(field, value) for field, value in message.ListFields()}


def _field(field: FieldDescriptor, value: Any) -> Any:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        value_field = field.message_type.fields_by_name["value"]
        return {str(key): _single(value_field, item) for key, item in value.items()}
    if field.is_repeated:
        return [_single(field, item) for item in value]
    return _single(field, value)


def _single(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_ENUM:
        if field.enum_type.full_name == "google.protobuf.NullValue":
            return None
        found = field.enum_type.values_by_number.get(value)
        return found.name if found is not None else value
    if field.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
        return _message(value)
    return value


def _struct_value(value: Any) -> Any:
    kind = value.WhichOneof("kind")
    if kind is None or kind == "null_value":
        return None
    if kind == "struct_value":
        return {key: _struct_value(item) for key, item in value.struct_value.fields.items()}
    if kind == "list_value":
        return [_struct_value(item) for item in value.list_value.values]
    return getattr(value, kind)
