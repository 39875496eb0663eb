"""Protobuf messages of flat types read as Arrow columns, the wire format decoded for the whole batch at once.

The Python runtime parses one message at a time; here numpy walks every message's fields together
(each round reads one tag and its value from every message not yet at its end), so a batch of a
message type of scalars, strings and enums costs a few numpy passes per field. Values are what
:mod:`indexing_task.protobuf_values` makes of them: the fields a message sets under their JSON names
(a proto3 field at its default is absent), enums by name. A message type with anything else
(nested messages, repeated fields, maps, bytes, required fields, oneofs of several fields) is not
read so; nor is a batch with a value the runtime might read otherwise (a known field of the wrong
wire type, a group, an unknown enum number, a string that is not UTF-8, any malformed message):
:class:`ColumnsUnreadable`, and the caller reads the batch message by message.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from indexing_task.avro_columns import ColumnsUnreadable

__all__ = ["ProtobufColumns", "protobuf_columns"]

_F = FieldDescriptor
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5
_WIRE = {**dict.fromkeys([_F.TYPE_INT32, _F.TYPE_INT64, _F.TYPE_UINT32, _F.TYPE_UINT64, _F.TYPE_SINT32,
                          _F.TYPE_SINT64, _F.TYPE_BOOL, _F.TYPE_ENUM], _VARINT),
         **dict.fromkeys([_F.TYPE_FIXED64, _F.TYPE_SFIXED64, _F.TYPE_DOUBLE], _FIXED64),
         **dict.fromkeys([_F.TYPE_FIXED32, _F.TYPE_SFIXED32, _F.TYPE_FLOAT], _FIXED32),
         _F.TYPE_STRING: _LENGTH}
_WIDE = frozenset({_F.TYPE_INT64, _F.TYPE_UINT64, _F.TYPE_SINT64, _F.TYPE_FIXED64, _F.TYPE_SFIXED64, _F.TYPE_DOUBLE,
                   _F.TYPE_BOOL})
"""64-bit kinds (and bool, any nonzero varint): a 32-bit kind keeps the low 32 bits of its varint."""
_PAD = 16  # zero bytes after the batch: a read past a message's end stays in the buffer (and is refused)


@dataclass(frozen=True)
class _Field:
    names: tuple[str, ...]  # its JSON name, and its proto name where the spec reads that
    number: int
    type: int
    wire: int
    presence: bool  # explicit: present when on the wire; else absent at its default
    enum: tuple[np.ndarray, pa.Array] | None  # sorted numbers, and the names in that order


def protobuf_columns(message: Descriptor, aliases: dict[str, str]) -> ProtobufColumns | None:
    """A columnar reader of ``message``, or None if its fields are not all flat.

    ``aliases``: proto name -> JSON name, for the fields the spec reads by proto name.
    """
    if message.full_name.startswith("google.protobuf."):
        return None
    fields = []
    for f in message.fields:
        oneof = getattr(f, "containing_oneof", None)
        if f.type not in _WIRE or f.is_repeated or f.is_required or (oneof is not None and len(oneof.fields) > 1):
            return None
        enum = None
        if f.type == _F.TYPE_ENUM:
            if f.enum_type.full_name == "google.protobuf.NullValue":
                return None
            by_number = sorted({v.number: v.name for v in reversed(f.enum_type.values)}.items())
            enum = (np.array([n for n, _ in by_number], np.int64), pa.array([name for _, name in by_number]))
        names = (f.json_name, *(alias for alias, json_name in aliases.items() if json_name == f.json_name))
        fields.append(_Field(names, f.number, f.type, _WIRE[f.type], f.has_presence, enum))
    every = [n for f in fields for n in f.names]
    if not every or len({n.lower() for n in every}) != len(every):  # DuckDB's structs need names unique ignoring case
        return None
    return ProtobufColumns(fields)


def _varints(buf: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The varint at each of ``at``: (value, where the next field starts, whether it ended in 10 bytes)."""
    value = np.zeros(len(at), np.uint64)
    going = np.ones(len(at), bool)  # still in the varint
    length = np.zeros(len(at), np.int64)
    for k in range(10):
        byte = buf[at + k]
        value |= np.where(going, (byte & 0x7F).astype(np.uint64) << np.uint64(7 * k), np.uint64(0))
        length += going
        going &= byte >= 0x80
        if not going.any():
            return value, at + length, np.ones(len(at), bool)
    return value, at + length, ~going


def _groups(keys: np.ndarray) -> list[tuple[int, np.ndarray | slice]]:
    """Each distinct key and where it is (the usual round: every message at the same field, one group)."""
    if (keys == keys[0]).all():
        return [(int(keys[0]), slice(None))]
    return [(int(key), keys == key) for key in np.unique(keys)]


def _fixed(buf: np.ndarray, at: np.ndarray, size: int) -> np.ndarray:
    """The little-endian ``size``-byte value at each of ``at``."""
    value = np.zeros(len(at), np.uint64)
    for k in range(size):
        value |= buf[at + k].astype(np.uint64) << np.uint64(8 * k)
    return value


class ProtobufColumns:
    """Reads messages of one flat message type into a struct array."""

    def __init__(self, fields: list[_Field]) -> None:
        self._fields = fields
        self._by_number = {f.number: i for i, f in enumerate(fields)}
        self._by_tag = {f.number << 3 | f.wire: i for i, f in enumerate(fields)}
        self._max_rounds = 2 * len(fields) + 16  # every field set, some twice, a few unknown ones

    def read(self, messages: pa.Array) -> pa.StructArray:
        """``messages`` (binary, no nulls) decoded, in order.

        :class:`ColumnsUnreadable` if any might read otherwise message by message.
        """
        n = len(messages)
        offsets = np.frombuffer(messages.buffers()[1], np.int32, n + 1, messages.offset * 4).astype(np.int64)
        buf = np.concatenate([np.frombuffer(messages.buffers()[2] or b"", np.uint8)[:offsets[-1]],
                              np.zeros(_PAD, np.uint8)])
        at, ends = offsets[:-1].copy(), offsets[1:]
        seen = np.zeros((len(self._fields), n), bool)
        raw = np.zeros((len(self._fields), n), np.uint64)  # a number's bits, or a string's start
        lengths = np.zeros((len(self._fields), n), np.int64)
        rounds = 0
        while (found := np.flatnonzero(at < ends)).size:
            rounds += 1
            if rounds > self._max_rounds:  # each round costs numpy passes: many fields cost less one by one
                raise ColumnsUnreadable(f"a message of more than {self._max_rounds} fields")
            live: np.ndarray | slice = slice(None) if found.size == n else found  # a view while none has ended
            tag, start, ok = _varints(buf, at[live])
            nxt, value, length = start.copy(), np.zeros(found.size, np.uint64), np.zeros(found.size, np.int64)
            for wire, sel in _groups(tag & np.uint64(7)):
                if wire == _VARINT:
                    value[sel], nxt[sel], good = _varints(buf, start[sel])
                    ok[sel] &= good
                elif wire in (_FIXED64, _FIXED32):
                    width = 8 if wire == _FIXED64 else 4
                    value[sel], nxt[sel] = _fixed(buf, start[sel], width), start[sel] + width
                elif wire == _LENGTH:
                    size, begin, good = _varints(buf, start[sel])
                    ok[sel] &= good & (size < 2**31)
                    value[sel], length[sel] = begin.astype(np.uint64), size.astype(np.int64)
                    nxt[sel] = begin + np.minimum(size, 2**31).astype(np.int64)
                else:  # groups, or not a wire type
                    raise ColumnsUnreadable("a group or an invalid wire type")
            if not (ok.all() and (nxt <= ends[live]).all() and (tag >= 8).all()  # field numbers from 1
                    and (tag < 2**32).all()):  # a longer tag is the runtime's DecodeError
                raise ColumnsUnreadable("a malformed message")
            for tag_seen, sel in _groups(tag):
                i = self._by_tag.get(tag_seen)
                if i is None:
                    if tag_seen >> 3 in self._by_number:
                        raise ColumnsUnreadable("a known field of another wire type")
                    continue  # an unknown field: skipped, as the runtime keeps it aside
                rows = live if isinstance(sel, slice) else found[sel]  # set twice: the last counts, as in the runtime
                seen[i, rows], raw[i, rows], lengths[i, rows] = True, value[sel], length[sel]
            at[live] = nxt
        arrays: list[pa.Array] = []
        names: list[str] = []
        for i, f in enumerate(self._fields):
            array = self._array(f, raw[i], lengths[i], seen[i], buf)
            arrays += [array] * len(f.names)
            names += f.names
        return pa.StructArray.from_arrays(arrays, names=names)

    @staticmethod
    def _array(f: _Field, raw: np.ndarray, lengths: np.ndarray, seen: np.ndarray, buf: np.ndarray) -> pa.Array:
        """One field's values: null where the message does not set it."""
        low = (raw & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        bits = lengths > 0 if f.wire == _LENGTH else (raw if f.type in _WIDE else low) != 0  # the value's own bits
        present = seen if f.presence else seen & bits
        if f.type == _F.TYPE_STRING:
            starts = raw.astype(np.int64)
            size = np.where(present, lengths, 0)
            offsets = np.zeros(len(raw) + 1, np.int64)
            np.cumsum(size, out=offsets[1:])
            index = np.arange(offsets[-1]) - np.repeat(offsets[:-1] - starts, size)
            validity = pa.py_buffer(np.packbits(present, bitorder="little"))
            data = pa.py_buffer(buf[index].tobytes())
            array = pa.LargeStringArray.from_buffers(len(raw), pa.py_buffer(offsets), data, validity)
            try:
                array.validate(full=True)
            except pa.ArrowInvalid:
                raise ColumnsUnreadable("a string that is not UTF-8") from None
            return array
        if f.enum is not None:
            numbers, symbols = f.enum
            number = low.view(np.int32).astype(np.int64)
            where = np.minimum(np.searchsorted(numbers, number), len(numbers) - 1)
            if (present & (numbers[where] != number)).any():
                raise ColumnsUnreadable("an enum number the type does not name")
            return symbols.take(pa.array(where, mask=~present))
        values = _numbers(f.type, raw, low)
        return pa.array(values, mask=~present)


def _numbers(kind: int, raw: np.ndarray, low: np.ndarray) -> np.ndarray:
    """A numeric field's values from their wire bits (``low``: the low 32 of them)."""
    if kind in (_F.TYPE_INT32, _F.TYPE_SFIXED32):
        return low.view(np.int32)
    if kind in (_F.TYPE_UINT32, _F.TYPE_FIXED32):
        return low
    if kind in (_F.TYPE_INT64, _F.TYPE_SFIXED64):
        return raw.view(np.int64)
    if kind in (_F.TYPE_UINT64, _F.TYPE_FIXED64):
        return raw
    if kind == _F.TYPE_SINT32:  # zigzag
        return (low >> np.uint32(1)).view(np.int32) ^ -(low & np.uint32(1)).view(np.int32)
    if kind == _F.TYPE_SINT64:
        return (raw >> np.uint64(1)).view(np.int64) ^ -(raw & np.uint64(1)).view(np.int64)
    if kind == _F.TYPE_BOOL:
        return raw.astype(bool)
    return low.view(np.float32) if kind == _F.TYPE_FLOAT else raw.view(np.float64)
