"""Protobuf messages as Druid's ``ProtobufConverter`` reads them, and the descriptors a registry's schema needs.

A message becomes the fields it sets (a proto3 field at its default is absent), under their JSON
names (``http_method`` is ``httpMethod``; also under the proto name where the spec reads that
name), enums by name, 64-bit integers as numbers, maps as objects, ``Timestamp``/``Duration``/
``FieldMask`` as their JSON strings, wrappers and ``Struct``/``Value``/``ListValue`` unwrapped.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable
from typing import Any

from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

from indexing_task.protobuf_columns import protobuf_columns
from specs.protobuf import descriptor_pool_of

__all__ = ["ProtobufReader", "indexed_message", "registry_files"]

FetchVersion = Callable[[str, int], Any]
"""``(subject, version) -> Schema``: a referenced schema of the registry (serialized format)."""


def registry_files(schema: Any, fetch: FetchVersion) -> list[descriptor_pb2.FileDescriptorProto]:
    """The registry's Protobuf ``schema`` (serialized format) and every file it imports, the schema's last."""
    files: dict[str, descriptor_pb2.FileDescriptorProto] = {}

    def add(name: str, text: str, references: Iterable[Any], depth: int = 0) -> descriptor_pb2.FileDescriptorProto:
        if depth > 20:
            raise ValueError("imports nested deeper than 20")
        for reference in references:
            if reference.name not in files:
                referenced = fetch(reference.subject, reference.version)
                files[reference.name] = add(reference.name, referenced.schema_str, referenced.references or (),
                                            depth + 1)
        file = descriptor_pb2.FileDescriptorProto()
        file.ParseFromString(base64.b64decode(text))
        file.name = name
        return file

    main = add("__schema__.proto", schema.schema_str, schema.references or ())
    return [*files.values(), main]


def indexed_message(files: list[descriptor_pb2.FileDescriptorProto], indexes: list[int]) -> Descriptor:
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


class ProtobufReader:
    """Decodes one message type to the plain values Druid's converter makes of it."""

    def __init__(self, message: Descriptor, names: frozenset[str]) -> None:
        self._class = GetMessageClass(message)
        self._aliases = {f.name: f.json_name for f in message.fields if f.name != f.json_name and f.name in names}
        self.columns = protobuf_columns(message, self._aliases)
        """Reads a batch of the message type at once, if its fields are flat."""

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
