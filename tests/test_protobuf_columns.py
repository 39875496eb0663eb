"""Protobuf read as columns for a whole batch at once gives exactly what the runtime's converter gives.

Random flat message types (every scalar type, proto3 with and without ``optional``, proto2) and random
messages, some with unknown fields or fields set twice; and random bytes: whenever the columnar read
answers, each row is the converter's dict of that message; where the runtime could read a message
otherwise (or not at all), the columnar read refuses the batch.
"""

from __future__ import annotations

import itertools
from typing import Any

import pyarrow as pa
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.message_factory import GetMessageClass
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from indexing_task.avro_columns import ColumnsUnreadable
from indexing_task.protobuf_columns import protobuf_columns
from indexing_task.protobuf_values import ProtobufReader

pytestmark = pytest.mark.unit

_P = descriptor_pb2.FieldDescriptorProto
_SCALARS = {_P.TYPE_INT32: st.integers(-2**31, 2**31 - 1), _P.TYPE_INT64: st.integers(-2**63, 2**63 - 1),
            _P.TYPE_UINT32: st.integers(0, 2**32 - 1), _P.TYPE_UINT64: st.integers(0, 2**64 - 1),
            _P.TYPE_SINT32: st.integers(-2**31, 2**31 - 1), _P.TYPE_SINT64: st.integers(-2**63, 2**63 - 1),
            _P.TYPE_FIXED32: st.integers(0, 2**32 - 1), _P.TYPE_FIXED64: st.integers(0, 2**64 - 1),
            _P.TYPE_SFIXED32: st.integers(-2**31, 2**31 - 1), _P.TYPE_SFIXED64: st.integers(-2**63, 2**63 - 1),
            _P.TYPE_BOOL: st.booleans(), _P.TYPE_STRING: st.text(max_size=6),
            _P.TYPE_FLOAT: st.floats(width=32, allow_nan=False), _P.TYPE_DOUBLE: st.floats(allow_nan=False),
            _P.TYPE_ENUM: st.sampled_from([0, 1, 2])}
_counter = itertools.count()


@st.composite
def _message_types(draw: st.DrawFn) -> Any:
    syntax = draw(st.sampled_from(["proto3", "proto2"]))
    file = descriptor_pb2.FileDescriptorProto(name=f"t{next(_counter)}.proto", package="t", syntax=syntax)
    file.enum_type.add(name="Color").value.extend(
        [descriptor_pb2.EnumValueDescriptorProto(name=n, number=i) for i, n in enumerate(["NONE", "RED", "BLUE"])])
    message = file.message_type.add(name="Event")
    kinds = draw(st.lists(st.sampled_from(sorted(_SCALARS)), min_size=1, max_size=8))
    numbers = draw(st.lists(st.integers(1, 3000), min_size=len(kinds), max_size=len(kinds), unique=True))
    for i, (kind, number) in enumerate(zip(kinds, numbers, strict=True)):
        field = message.field.add(name=f"field_{i}", number=number, type=kind, label=_P.LABEL_OPTIONAL)
        if kind == _P.TYPE_ENUM:
            field.type_name = ".t.Color"
        if syntax == "proto3" and draw(st.booleans()):  # explicit presence
            field.proto3_optional = True
            field.oneof_index = len(message.oneof_decl)
            message.oneof_decl.add(name=f"_field_{i}")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return pool.FindMessageTypeByName("t.Event")


def _messages(draw: st.DrawFn, descriptor: Any) -> list[bytes]:
    cls = GetMessageClass(descriptor)
    out = []
    for _ in range(draw(st.integers(1, 12))):
        message = cls()
        for field in descriptor.fields:
            if draw(st.booleans()):
                setattr(message, field.name, draw(_SCALARS[field.type]))
        data = message.SerializeToString()
        if draw(st.booleans()):  # an unknown field (number 4000, a varint) and a second copy of some fields
            data += b"\x80\xfa\x01" + bytes([draw(st.integers(0, 127))]) + draw(st.sampled_from([b"", data]))
        out.append(data)
    return out


def _runtime(reader: ProtobufReader, messages: list[bytes]) -> list[dict[str, Any]] | None:
    try:
        return [reader(m) for m in messages]
    except Exception:  # noqa: BLE001 (the runtime cannot read one of them)
        return None


def _columnar(descriptor: Any, messages: list[bytes]) -> list[dict[str, Any]] | None:
    columns = protobuf_columns(descriptor, {})
    assert columns is not None
    try:
        rows = columns.read(pa.array(messages, pa.binary())).to_pylist()
    except ColumnsUnreadable:
        return None
    return [{k: v for k, v in row.items() if v is not None} for row in rows]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_flat_messages_read_as_columns_are_what_the_converter_reads(data: st.DataObject) -> None:
    descriptor = data.draw(_message_types())
    messages = _messages(data.draw, descriptor)
    expected = _runtime(ProtobufReader(descriptor, frozenset()), messages)
    assert expected is not None
    assert _columnar(descriptor, messages) == expected


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_damaged_messages_are_refused_or_read_as_the_runtime_reads_them(data: st.DataObject) -> None:
    """Random bytes spliced into, cut from or appended to valid messages: never a silently different row."""
    descriptor = data.draw(_message_types())
    messages = []
    for message in _messages(data.draw, descriptor):
        at = data.draw(st.integers(0, len(message)))
        cut = data.draw(st.integers(0, 3))
        messages.append(message[:at] + data.draw(st.binary(max_size=4)) + message[at + cut:])
    columnar = _columnar(descriptor, messages)
    event("read as columns" if columnar is not None else "refused")
    if columnar is not None:
        assert columnar == _runtime(ProtobufReader(descriptor, frozenset()), messages)


def test_only_flat_message_types_are_read_as_columns() -> None:
    file = descriptor_pb2.FileDescriptorProto(name="nested.proto", package="n", syntax="proto3")
    inner = file.message_type.add(name="Inner")
    inner.field.add(name="x", number=1, type=_P.TYPE_INT64, label=_P.LABEL_OPTIONAL)
    outer = file.message_type.add(name="Outer")
    outer.field.add(name="inner", number=1, type=_P.TYPE_MESSAGE, type_name=".n.Inner", label=_P.LABEL_OPTIONAL)
    tags = file.message_type.add(name="Tags")
    tags.field.add(name="tag", number=1, type=_P.TYPE_STRING, label=_P.LABEL_REPEATED)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    assert protobuf_columns(pool.FindMessageTypeByName("n.Inner"), {}) is not None
    assert protobuf_columns(pool.FindMessageTypeByName("n.Outer"), {}) is None
    assert protobuf_columns(pool.FindMessageTypeByName("n.Tags"), {}) is None


def test_a_message_of_many_fields_is_read_message_by_message_not_in_as_many_rounds() -> None:
    """Each round of the columnar read costs a few numpy passes whatever the batch: a value of 100,000 unknown
    fields would take 100,000 rounds (seconds), where the runtime parses it in milliseconds.
    """
    file = descriptor_pb2.FileDescriptorProto(name="many.proto", package="m", syntax="proto3")
    file.message_type.add(name="E").field.add(name="a", number=1, type=_P.TYPE_INT64, label=_P.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    descriptor = pool.FindMessageTypeByName("m.E")
    hostile = b"\x10\x01" * 100_000  # field 2, unknown to the type: a varint, 100,000 times
    columns = protobuf_columns(descriptor, {})
    assert columns is not None
    with pytest.raises(ColumnsUnreadable, match="fields"):
        columns.read(pa.array([b"\x08\x05", hostile], pa.binary()))
    assert _runtime(ProtobufReader(descriptor, frozenset()), [b"\x08\x05", hostile]) == [{"a": 5}, {}]


def _flat(*kinds: int) -> object:
    file = descriptor_pb2.FileDescriptorProto(name=f"h{next(_counter)}.proto", package="h", syntax="proto3")
    file.enum_type.add(name="Color").value.extend(
        [descriptor_pb2.EnumValueDescriptorProto(name=n, number=i) for i, n in enumerate(["NONE", "RED"])])
    message = file.message_type.add(name="E")
    for number, kind in enumerate(kinds, start=1):
        field = message.field.add(name=f"f{number}", number=number, type=kind, label=_P.LABEL_OPTIONAL)
        if kind == _P.TYPE_ENUM:
            field.type_name = ".h.Color"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return pool.FindMessageTypeByName("h.E")


@pytest.mark.parametrize("kinds, message", [
    ((_P.TYPE_INT32, _P.TYPE_SINT32, _P.TYPE_UINT32, _P.TYPE_ENUM),  # varints whose low 32 bits are zero
     b"\x08\x80\x80\x80\x80\x10" b"\x10\x80\x80\x80\x80\x10" b"\x18\x80\x80\x80\x80\x10" b"\x20\x80\x80\x80\x80\x10"),
    ((_P.TYPE_INT64,), b"\x08\x05" + b"\x80\x80\x80\x80\x80\x01" + b"\x01"),  # a tag past 32 bits
    ((_P.TYPE_INT64,), b"\x88\x80\x80\x80\x80\x01\x07"),  # a 6-byte tag whose low bits say field 1
], ids=["32-bit-zero-low-bits", "tag-past-32-bits", "six-byte-tag"])
def test_the_attack_reviews_messages_read_as_the_runtime_reads_them_or_not_as_columns(kinds, message) -> None:
    descriptor = _flat(*kinds)
    columnar = _columnar(descriptor, [b"\x08\x01", message])
    if columnar is not None:
        assert columnar == _runtime(ProtobufReader(descriptor, frozenset()), [b"\x08\x01", message])
