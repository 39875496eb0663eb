"""Druid's ``avro_stream`` input format with an inline schema: the schema, checked when a spec is submitted.

Druid reads Avro without logical-type conversions (a ``timestamp-millis`` field is its long), so
the schema is used with its ``logicalType`` annotations removed.
"""

from __future__ import annotations

from typing import Any, Literal

import fastavro
from fastavro.types import Schema
from pydantic import Field, model_validator

from specs.data_schema import SpecModel
from specs.spec_errors import SpecError

__all__ = ["AvroBytesDecoderSpec", "parse_avro_schema"]


def parse_avro_schema(schema: Any) -> Schema:
    """``schema`` parsed by fastavro, its logical types removed; :class:`SpecError` if it is not valid Avro."""
    try:
        return fastavro.parse_schema(_without_logical_types(schema))
    except (fastavro.schema.SchemaParseException, ValueError, TypeError, KeyError) as exc:
        raise SpecError.at("schema", f"not a valid Avro schema: {exc}") from None


def _without_logical_types(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {key: _without_logical_types(value) for key, value in schema.items() if key != "logicalType"}
    if isinstance(schema, list):
        return [_without_logical_types(item) for item in schema]
    return schema


class AvroBytesDecoderSpec(SpecModel):
    """How an Avro value is decoded: with a schema given in the spec (``schema_inline``)."""

    type: Literal["schema_inline"]
    """Only an inline schema; a schema registry or repository is not supported."""
    avro_schema: dict[str, Any] = Field(alias="schema")
    """The writer's schema of every record value."""

    @model_validator(mode="after")
    def _valid_schema(self) -> AvroBytesDecoderSpec:
        parse_avro_schema(self.avro_schema)
        return self
