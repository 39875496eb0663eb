"""Avro record values as JSON text, so the parse pass reads them as it reads JSON.

Each value is one datum of the spec's inline schema (no container header), decoded without
logical-type conversions, as Druid reads it. A value that does not decode, or holds what JSON
cannot carry as Druid would read it (bytes without ``binaryAsString``, NaN or infinity), gets a
reason instead, and the parse makes its record unparseable with that reason.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from typing import Any

import fastavro

from specs.avro import parse_avro_schema

__all__ = ["AvroValues"]


class _Unreadable(Exception):
    """A decoded value JSON cannot carry as Druid reads it."""


class AvroValues:
    """Decodes values of one Avro schema to JSON text."""

    def __init__(self, schema_json: str, binary_as_string: bool) -> None:
        self._schema = parse_avro_schema(json.loads(schema_json))
        self._binary_as_string = binary_as_string
        self._encoder = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=self._bytes_as_text)

    def to_json(self, values: Sequence[bytes | None]) -> tuple[list[bytes | None], list[str | None]]:
        """Each value as JSON text (None stays None), and the reason for each one that cannot be read."""
        out: list[bytes | None] = []
        problems: list[str | None] = []
        for value in values:
            problem = None
            if value is None:
                out.append(None)
            else:
                try:
                    datum = fastavro.schemaless_reader(io.BytesIO(value), self._schema, None)
                except Exception as exc:  # noqa: BLE001 (any decoding failure is this record's, never the task's)
                    problem = f"not an Avro value of the spec's schema ({type(exc).__name__})"
                else:
                    try:
                        out.append(self._encoder.encode(datum).encode())
                    except _Unreadable as exc:
                        problem = str(exc)
                    except ValueError:  # allow_nan=False
                        problem = "a NaN or infinite number"
                if problem is not None:
                    out.append(b"")
            problems.append(problem)
        return out, problems

    def _bytes_as_text(self, value: Any) -> str:
        """``json.dumps``'s hook for what JSON has no type for: Avro's bytes and fixed."""
        if not isinstance(value, bytes) or not self._binary_as_string:
            raise _Unreadable("a bytes or fixed value (binaryAsString is false)")
        try:
            return value.decode()
        except UnicodeDecodeError:
            raise _Unreadable("a bytes or fixed value that is not UTF-8 text") from None
