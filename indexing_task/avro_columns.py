"""Avro datums read as Arrow columns in one native pass (polars' Avro reader), for schemas of plain records.

The batch becomes one block of an in-memory Avro container file, each datum followed by a random
sentinel: a datum read as longer or shorter than it is (truncated, trailing bytes) misplaces the
sentinel, and any datum that does not decode fails the read. Then the caller decodes the batch
datum by datum (:mod:`indexing_task.value_decoders`), which finds the bad ones. Only records of
booleans, numbers, strings, enums, nested records and ``["null", T]`` unions are read this way: no
length but a string's steers the reader.

polars reads what it is told, so it is told only what it reads exactly as fastavro does: an ``int``
as the ``long`` of the same encoding (polars would keep 32 bits of a longer varint), an enum as its
index and a boolean as its byte (``fixed`` of 1), checked here (an index past the symbols, a byte
other than 0 or 1: the batch goes datum by datum). A union index past the union still reads as its
non-null branch here, where the datum-by-datum reader calls the value unreadable.
"""
from __future__ import annotations

import io
import json
import secrets
from collections.abc import Iterator
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["AvroColumns", "ColumnsUnreadable", "avro_columns"]

_MAX_DEPTH = 8  # records nested deeper are read value by value
_SCALARS = frozenset({"boolean", "int", "long", "float", "double", "string"})
_SENTINEL = "__overlord_sentinel"
_SYNC = b"\x8a\x16\x9b\x5e\x00\xc3\x71\x42\xd1\x0b\x7f\x3c\xe4\x29\x66\x05"


class ColumnsUnreadable(Exception):
    """The batch cannot be read in one pass: a datum does not decode."""


def avro_columns(schema: Any) -> AvroColumns | None:
    """A columnar reader of ``schema`` (logical types already removed), or None if it is not plain records."""
    if not (isinstance(schema, dict) and schema.get("type") == "record" and _plain_type(schema, top=True)):
        return None
    return AvroColumns(schema)


def _plain_type(node: Any, top: bool = False, depth: int = 0) -> bool:
    """Whether ``node`` is a record (``top``) or a field type the columnar read takes."""
    if isinstance(node, str):
        return node in _SCALARS
    if isinstance(node, list):  # a union: null and one other type
        return len(node) == 2 and "null" in node and _plain_type(next(n for n in node if n != "null"), depth=depth)
    if not isinstance(node, dict):
        return False
    kind = node.get("type")
    if kind == "record":  # names unique ignoring case, as DuckDB's structs need them
        fields = node.get("fields", ())
        if depth > _MAX_DEPTH:  # polars' reader recurses per level
            return False
        names = [f.get("name") for f in fields if isinstance(f, dict)]
        return (len(names) == len(fields) == len({str(n).lower() for n in names}) > 0 and _SENTINEL not in names
                and all(_plain_type(f.get("type"), depth=depth + 1) for f in fields))
    if kind == "enum":
        return isinstance(node.get("symbols"), list) and len(node["symbols"]) > 0
    return not top and isinstance(kind, str) and kind in _SCALARS and set(node) == {"type"}


def _varint(n: int) -> bytes:
    """Avro's zigzag varint of ``n``."""
    zigzag = (n << 1) ^ (n >> 63)
    out = bytearray()
    while zigzag >= 0x80:
        out.append(zigzag & 0x7F | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


class AvroColumns:
    """Reads datums of one plain record schema into a struct array."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self._schema = schema
        read_as = _read_as(schema, iter(range(1_000_000)))
        row = {**read_as, "fields": [*read_as["fields"], {"name": _SENTINEL, "type": "long"}]}  # a datum, then it
        meta = {b"avro.schema": json.dumps(row).encode(), b"avro.codec": b"null"}
        self._header = b"Obj\x01" + _varint(len(meta)) + b"".join(
            _varint(len(k)) + k + _varint(len(v)) + v for k, v in meta.items()) + b"\x00" + _SYNC

    def read(self, datums: pa.Array) -> pa.StructArray:
        """``datums`` (binary, no nulls) decoded, in order; :class:`ColumnsUnreadable` if any does not decode.

        (A block per datum would isolate them too, but costs polars 60 times more.)
        """
        sentinel = secrets.randbits(62)
        rows = pc.binary_join_element_wise(datums, pa.scalar(_varint(sentinel)), b"")
        offsets = np.frombuffer(rows.buffers()[1], dtype=np.int32, count=len(rows) + 1, offset=rows.offset * 4)
        body = rows.buffers()[2][int(offsets[0]):int(offsets[-1])]
        block = _varint(len(rows)) + _varint(len(body)) + body.to_pybytes() + _SYNC
        try:
            table = pl.read_avro(io.BytesIO(self._header + block)).to_arrow()
            table.validate(full=True)
        except (Exception, pl.exceptions.PanicException) as exc:  # noqa: BLE001 (a Rust panic is a BaseException)
            raise ColumnsUnreadable(f"{type(exc).__name__}: {exc}") from None
        if table.num_rows != len(datums) or not pc.all(pc.equal(table.column(_SENTINEL), sentinel)).as_py():
            raise ColumnsUnreadable("a datum read as longer or shorter than it is")
        read = pa.StructArray.from_arrays([table.column(i).combine_chunks() for i in range(table.num_columns - 1)],
                                          names=table.column_names[:-1])
        return _as_written(read, self._schema)


def _read_as(node: Any, names: Iterator[int]) -> Any:
    """The schema polars is told: ``node`` with ints as longs, enums as their index, booleans as their byte."""
    if isinstance(node, list):
        return [_read_as(branch, names) for branch in node]
    if node == "int":
        return "long"
    if node == "boolean":
        return {"type": "fixed", "name": f"__overlord_boolean_{next(names)}", "size": 1}
    if isinstance(node, dict) and node.get("type") == "enum":
        return "long"
    if isinstance(node, dict) and node.get("type") == "record":
        return {**node, "fields": [{**f, "type": _read_as(f["type"], names)} for f in node["fields"]]}
    return node


def _as_written(array: pa.Array, node: Any) -> pa.Array:
    """``array`` read by :func:`_read_as`'s schema, as the writer's schema ``node`` means it."""
    if isinstance(node, list):
        node = next(branch for branch in node if branch != "null")
    if node == "boolean":
        bits = pa.array([b"\x00", b"\x01"], array.type)
        if pc.any(pc.and_(pc.is_valid(array), pc.invert(pc.is_in(array, value_set=bits)))).as_py():
            raise ColumnsUnreadable("a boolean byte other than 0 or 1")
        return pc.equal(array, bits[1])
    if isinstance(node, dict) and node.get("type") == "enum":
        low, high = pc.min_max(array).values()
        if low.is_valid and not (0 <= low.as_py() and high.as_py() < len(node["symbols"])):
            raise ColumnsUnreadable("an enum index past its symbols")
        return pa.array(node["symbols"], pa.string()).take(array)
    if isinstance(node, dict) and node.get("type") == "record":
        fields = [_as_written(array.field(i), f["type"]) for i, f in enumerate(node["fields"])]
        return pa.StructArray.from_arrays(fields, names=[f["name"] for f in node["fields"]],
                                          mask=array.is_null() if array.null_count else None)
    return array
