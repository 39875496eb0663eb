"""Query results in Druid's formats (JSON objects or arrays, lines, CSV) and as a text table."""

from __future__ import annotations

import base64
import csv
import io
import json
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any, Literal

import pyarrow as pa

__all__ = ["CONTENT_TYPES", "QueryResult", "ResultFormat", "druid_types", "format_result", "format_table"]

ResultFormat = Literal["object", "array", "objectLines", "arrayLines", "csv"]
CONTENT_TYPES: dict[str, str] = {"object": "application/json", "array": "application/json",
                                 "objectLines": "text/plain", "arrayLines": "text/plain", "csv": "text/csv"}
"""Druid's result formats and the Content-Type of each response."""


@dataclass(frozen=True)
class QueryResult:
    """A query's result as an Arrow table (timestamps in UTC), and the engine that answered it."""

    table: pa.Table
    engine: Literal["spark", "duckdb"] = "spark"

    @property
    def columns(self) -> list[str]:
        return list(self.table.column_names)

    def rows(self) -> list[list[Any]]:
        """Rows as JSON-ready lists: timestamps as ISO-8601 with ``Z`` (milliseconds), as Druid writes them."""
        columns = [[_json_value(v) for v in column.to_pylist()] for column in self.table.columns]
        return [list(row) for row in zip(*columns, strict=True)] if columns else []


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        value = value.astimezone(UTC) if value.tzinfo else value
        return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
    if isinstance(value, date):  # Druid writes a DATE as its midnight
        return f"{value.isoformat()}T00:00:00.000Z"
    if isinstance(value, Decimal):
        exponent = value.as_tuple().exponent
        return float(value) if isinstance(exponent, int) and exponent < 0 else int(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) for v in value):  # Arrow gives a map as (key, value) pairs
            return {str(k): _json_value(v) for k, v in value}
        return [_json_value(v) for v in value]
    return value


def _text(value: Any) -> str:
    """A JSON-ready value as CSV or table text: empty for null, JSON for nested values."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


def druid_types(table: pa.Table) -> list[tuple[str, str]]:
    """Each column's Druid type and SQL type, as Druid's ``typesHeader`` and ``sqlTypesHeader`` name them."""
    def types(kind: pa.DataType) -> tuple[str, str]:
        if pa.types.is_timestamp(kind):
            return "LONG", "TIMESTAMP"
        if pa.types.is_date(kind):
            return "LONG", "DATE"
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            return "STRING", "VARCHAR"
        if pa.types.is_boolean(kind):
            return "LONG", "BOOLEAN"
        if pa.types.is_integer(kind):
            return "LONG", "BIGINT" if kind.bit_width == 64 else "INTEGER"
        if pa.types.is_float32(kind):
            return "FLOAT", "FLOAT"
        if pa.types.is_floating(kind) or pa.types.is_decimal(kind):
            return "DOUBLE", "DOUBLE" if pa.types.is_floating(kind) else "DECIMAL"
        return "COMPLEX", "OTHER"
    return [types(kind) for kind in table.schema.types]


def format_result(result: QueryResult, result_format: ResultFormat, header: bool = False, types_header: bool = False,
                  sql_types_header: bool = False) -> list[dict[str, Any]] | list[list[Any]] | str:
    """Druid's formats: a list of objects or arrays, or text (one row a line, then a blank line).

    ``header`` adds a first row of the column names; ``types_header``/``sql_types_header`` add
    their Druid/SQL types (in that row for objects, as rows of their own for arrays and CSV).
    """
    columns, rows = result.columns, result.rows()
    types = druid_types(result.table)
    type_rows = ([[t for t, _ in types]] if types_header else []) + ([[s for _, s in types]] if sql_types_header
                                                                     else [])
    if result_format in ("object", "objectLines"):
        objects = [dict(zip(columns, row, strict=True)) for row in rows]
        if header:
            described = [{**({"type": t} if types_header else {}), **({"sqlType": s} if sql_types_header else {})}
                         or None for t, s in types]
            objects = [dict(zip(columns, described, strict=True)), *objects]
        return objects if result_format == "object" else "".join(json.dumps(o) + "\n" for o in objects) + "\n"
    head = [list(columns), *type_rows] if header else []
    if result_format in ("array", "arrayLines"):
        arrays = [*head, *rows]
        return arrays if result_format == "array" else "".join(json.dumps(a) + "\n" for a in arrays) + "\n"
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerows(head)
    writer.writerows([_text(v) for v in row] for row in rows)
    return out.getvalue() + "\n"


def format_table(result: QueryResult) -> str:
    """A plain-text table for the command line, numbers right-aligned, then the row count."""
    columns, rows = result.columns, [[_text(v) for v in row] for row in result.rows()]
    numeric = [pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
               for t in result.table.schema.types]
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if num else c.ljust(w) for c, w, num in zip(cells, widths, numeric, strict=True))

    body = [line(columns), "  ".join("-" * w for w in widths), *(line(r) for r in rows)]
    return "\n".join(x.rstrip() for x in body) + f"\n({len(rows)} row{'s' if len(rows) != 1 else ''})"
