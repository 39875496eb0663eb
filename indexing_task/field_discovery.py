"""Schema discovery: a batch's top-level fields not seen before become dimensions (typed or strings)."""

from __future__ import annotations

import functools

import duckdb

from indexing_task.rollup_schema import RollupSchema
from indexing_task.typed_fields import VALUE_JSON
from segment_store.value_types import wider_type

__all__ = ["discovered_schema"]

_JSON_TYPES = {"BOOLEAN": "long", "BIGINT": "long", "UBIGINT": "long", "DOUBLE": "double", "VARCHAR": "string"}
"""The discovered type of a DuckDB ``json_each`` value type (booleans are 1/0, as Druid's strict booleans)."""


def discovered_schema(con: duckdb.DuckDBPyConnection, schema: RollupSchema, typed: bool = False) -> RollupSchema:
    """``schema`` with the fields of the batch registered on ``con`` as ``batch`` added as dimensions.

    The batch's records are JSON text ``__raw``, or (``typed``) typed rows ``__v``.

    String discovery takes every field but nested objects; typed discovery types each by the
    least restrictive type of its values here, and notes the fields holding arrays or objects.
    No field that is only ever null is discovered (as in Druid). ``schema`` itself if none is new.
    """
    record = f"{VALUE_JSON}::VARCHAR" if typed else "try(decode(__raw))"
    found = con.execute(  # an integer past BIGINT is a double, as Druid parses it
        "SELECT key, list(DISTINCT CASE WHEN type = 'UBIGINT' AND try_cast(value AS BIGINT) IS NULL "
        f"THEN 'DOUBLE' ELSE type END) FROM (SELECT {record} AS __s FROM batch) AS b, json_each(b.__s) "
        "WHERE coalesce(json_valid(__s) AND starts_with(ltrim(__s), '{'), false) AND type <> 'NULL' "
        "GROUP BY key ORDER BY key").fetchall()
    if schema.discover_types:
        types = {key: functools.reduce(wider_type, scalars) for key, kinds in found
                 if (scalars := [_JSON_TYPES[k] for k in kinds if k in _JSON_TYPES])}
        nested = [key for key, kinds in found if {"ARRAY", "OBJECT"} & set(kinds)]
        return schema.with_dimensions(types, nested)
    return schema.with_dimensions([key for key, kinds in found if kinds != ["OBJECT"]])
