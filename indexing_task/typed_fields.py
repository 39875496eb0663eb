"""SQL reading a field of a typed record (the batch's ``__v`` struct) as the JSON path would read its JSON text.

Decoded Avro read as columns (:mod:`indexing_task.avro_columns`) skips JSON: a field's text comes from
its column, the same text ``json_extract_string`` gives for the value written as JSON. Where a path
leads into something else than records and scalars, the caller reads the value's JSON instead.
"""

from __future__ import annotations

import pyarrow as pa

from specs.flatten import PathStep

__all__ = ["VALUE_JSON", "typed_text"]

VALUE_JSON = "to_json(__v)"
"""SQL for a typed record as JSON, for what its columns cannot say (a field's JSON type, a nested value)."""


def typed_text(value_type: pa.DataType, steps: tuple[PathStep, ...]) -> str | None:
    """SQL for the text at ``steps`` of the record (NULL where there is none); None where only its JSON can say."""
    sql, kind = "__v", value_type
    for step in steps:
        if not pa.types.is_struct(kind) or isinstance(step, int):
            return None if pa.types.is_list(kind) or pa.types.is_map(kind) else "NULL::VARCHAR"
        index = kind.get_field_index(step)  # by exact name: DuckDB's own struct lookup ignores case
        if index < 0:
            return "NULL::VARCHAR"
        sql, kind = f"struct_extract_at({sql}, {index + 1})", kind.field(index).type
    return _scalar_text(sql, kind)


def _scalar_text(sql: str, kind: pa.DataType) -> str | None:
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return sql
    if pa.types.is_integer(kind) or pa.types.is_boolean(kind) or pa.types.is_dictionary(kind):
        return f"{sql}::VARCHAR"
    if pa.types.is_floating(kind):  # as JSON's number text: 1e+20 reads 100000000000000000000.0
        return f"json_extract_string(to_json({sql}::DOUBLE), '$')"
    if pa.types.is_null(kind):
        return "NULL::VARCHAR"
    return None
