"""Druid's ``protobuf`` input format: how its values are decoded (``protoBytesDecoder``).

``file`` names a compiled descriptor set (``protoc -o``, best with ``--include_imports``) and
``inline`` carries one in base64 (``descriptorString``); ``protoMessageType`` picks the message
(short or full name; default: the first message of the set). A ``file`` descriptor is read only
from the directories the operator lists in ``OVERLORD_PROTOBUF_DESCRIPTOR_DIRS`` (a spec never
reads another server file), as a path or a ``file://`` URL, when a task's schema is built; the
task carries its bytes. ``schema_registry`` reads each value's schema from a Confluent registry
(:mod:`specs.schema_registry`). Google's well-known types (``Timestamp``, wrappers, ``Struct``, ...)
are always known, so a set compiled without ``--include_imports`` still loads.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from google.protobuf import (
    any_pb2,
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,
    empty_pb2,
    field_mask_pb2,
    struct_pb2,
    timestamp_pb2,
    wrappers_pb2,
)
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import DecodeError
from pydantic import Field, model_validator

from specs.data_schema import SpecModel
from specs.schema_registry import SchemaRegistrySpec
from specs.spec_errors import SpecError

__all__ = ["DESCRIPTOR_DIRS_VARIABLE", "ProtoBytesDecoderSpec", "descriptor_pool_of", "find_message",
           "parse_descriptor_set"]

DESCRIPTOR_DIRS_VARIABLE = "OVERLORD_PROTOBUF_DESCRIPTOR_DIRS"
"""Environment variable: the directories (``:``-separated) ``file`` descriptors may be read from."""

MAX_DESCRIPTOR_BYTES = 4 * 1024 * 1024  # large schemas with every import compile to a few hundred KB
_WELL_KNOWN = (any_pb2, duration_pb2, empty_pb2, field_mask_pb2, struct_pb2, timestamp_pb2, wrappers_pb2)


def descriptor_pool_of(files: list[descriptor_pb2.FileDescriptorProto]) -> descriptor_pool.DescriptorPool:
    """A pool of Google's well-known types and ``files`` (in dependency order or not)."""
    pool = descriptor_pool.DescriptorPool()
    known = set()
    for module in _WELL_KNOWN:
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
        known.add(module.DESCRIPTOR.name)
    pending = [f for f in files if f.name not in known]
    while pending:  # a file goes in once every file it imports is in
        ready = [f for f in pending if all(d in known for d in f.dependency)]
        if not ready:
            missing = sorted({d for f in pending for d in f.dependency if d not in known} - {f.name for f in pending})
            raise ValueError(f"imports missing from the descriptor set: {', '.join(missing) or 'a cycle'}"
                             " (compile it with protoc --include_imports)")
        for file in ready:
            pool.Add(file)
            known.add(file.name)
        pending = [f for f in pending if f.name not in known]
    return pool


def find_message(pool: descriptor_pool.DescriptorPool, files: list[descriptor_pb2.FileDescriptorProto],
                 name: str | None) -> Descriptor:
    """The message ``name`` (full, or short if unique) of ``files``, or their first message if None."""
    full_names = [f"{f.package}.{m.name}" if f.package else m.name for f in files for m in f.message_type]
    if name is None:
        if not full_names:
            raise ValueError("the descriptor set has no message")
        return pool.FindMessageTypeByName(full_names[0])
    wanted = name.lstrip(".")
    matches = [n for n in full_names if n == wanted] or [n for n in full_names if n.rsplit(".", 1)[-1] == wanted]
    if len(matches) != 1:
        raise ValueError(f"{'no' if not matches else 'more than one'} top-level message {name!r} in the descriptor "
                         f"set (it has {', '.join(full_names[:20]) or 'none'})")
    return pool.FindMessageTypeByName(matches[0])


def parse_descriptor_set(data: bytes) -> list[descriptor_pb2.FileDescriptorProto]:
    """The files of a serialized ``FileDescriptorSet``; ValueError if it is not one."""
    if len(data) > MAX_DESCRIPTOR_BYTES:
        raise ValueError(f"larger than {MAX_DESCRIPTOR_BYTES:,} bytes")
    descriptor_set = descriptor_pb2.FileDescriptorSet()
    try:
        descriptor_set.ParseFromString(data)
    except DecodeError:
        raise ValueError("not a compiled descriptor set (protoc -o)") from None
    if not descriptor_set.file:
        raise ValueError("not a compiled descriptor set (protoc -o): it holds no file")
    return list(descriptor_set.file)


def allowed_descriptor_path(descriptor: str, environ: Mapping[str, str] | None = None) -> Path:
    """The file ``descriptor`` (a path or ``file://`` URL) names, if under an allowed directory; else SpecError."""
    env = os.environ if environ is None else environ
    dirs = [Path(d).resolve() for d in env.get(DESCRIPTOR_DIRS_VARIABLE, "").split(":") if d.strip()]
    text = descriptor.removeprefix("file://")
    if "://" in text or not text or "\x00" in text:
        raise SpecError.at("descriptor", "a descriptor file is a path or a file:// URL (no other scheme): "
                                         "or give it inline (type inline, descriptorString)")
    if not dirs:
        raise SpecError.at("descriptor", f"descriptor files are off: the operator lists the directories they may be "
                                         f"read from in {DESCRIPTOR_DIRS_VARIABLE}; or give it inline")
    candidates = [Path(text)] if Path(text).is_absolute() else [d / text for d in dirs]
    for candidate in candidates:
        path = candidate.resolve()
        if any(path.is_relative_to(d) for d in dirs) and path.is_file():
            return path
    raise SpecError.at("descriptor", f"no such file in {DESCRIPTOR_DIRS_VARIABLE}'s directories: {descriptor[:200]!r}")


class _DescriptorDecoder(SpecModel):
    """A fixed message type of a compiled descriptor set."""

    proto_message_type: str | None = Field(default=None, max_length=1000)
    """The message of every value (default: the first message of the set)."""

    source_field: ClassVar[str] = "descriptor"
    """Where the descriptor set is given (the path of errors about it)."""

    def descriptor_bytes(self) -> bytes:
        raise NotImplementedError

    def task_json(self) -> dict[str, Any]:
        """What a task needs: the descriptor set's bytes (base64), read now, and the message type."""
        return {"type": "descriptor", "descriptor": base64.b64encode(self.descriptor_bytes()).decode(),
                "message": self.proto_message_type}

    @model_validator(mode="after")
    def _loads(self) -> _DescriptorDecoder:
        data = self.descriptor_bytes()
        try:
            files = parse_descriptor_set(data)
            find_message(descriptor_pool_of(files), files, self.proto_message_type)
        except ValueError as exc:
            raise SpecError.at("protoMessageType" if "message" in str(exc) else self.source_field, str(exc)) from None
        except TypeError as exc:  # the protobuf runtime refuses an inconsistent set
            raise SpecError.at(self.source_field, f"not a consistent descriptor set: {exc}") from None
        return self


class FileDecoderSpec(_DescriptorDecoder):
    """Druid's ``file`` decoder: a descriptor set file in an operator-allowed directory."""

    type: Literal["file"]
    """Decoder type."""
    descriptor: str = Field(max_length=4096)
    """The descriptor set: a path (relative to an allowed directory, or absolute within one) or file:// URL."""

    def descriptor_bytes(self) -> bytes:
        return allowed_descriptor_path(self.descriptor).read_bytes()


class InlineDecoderSpec(_DescriptorDecoder):
    """Druid's ``inline`` decoder: the descriptor set in the spec, base64."""

    type: Literal["inline"]
    """Decoder type."""
    descriptor_string: str = Field(max_length=MAX_DESCRIPTOR_BYTES * 4 // 3 + 4)
    """The compiled descriptor set, base64."""

    source_field: ClassVar[str] = "descriptorString"

    def descriptor_bytes(self) -> bytes:
        try:
            return base64.b64decode(self.descriptor_string, validate=True)
        except (binascii.Error, ValueError):
            raise SpecError.at("descriptorString", "not base64") from None


ProtoBytesDecoderSpec = Annotated[FileDecoderSpec | InlineDecoderSpec | SchemaRegistrySpec,
                                  Field(discriminator="type")]
