"""Druid's ``avro_stream`` decoders: an inline schema (checked when a spec is submitted) or a schema registry.

Druid reads Avro without logical-type conversions (a ``timestamp-millis`` field is its long), so
the schema is used with its ``logicalType`` annotations removed.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import fastavro
from fastavro.types import Schema
from pydantic import Field, model_validator

from specs.data_schema import SpecModel
from specs.schema_registry import SchemaRegistrySpec
from specs.spec_errors import SpecError

__all__ = ["AvroBytesDecoderSpec", "InlineAvroSpec", "parse_avro_schema", "refuse_recursion", "without_logical_types"]


def parse_avro_schema(schema: Any) -> Schema:
    """``schema`` parsed by fastavro, its logical types removed; :class:`SpecError` if it is not valid Avro."""
    try:
        return fastavro.parse_schema(without_logical_types(refuse_recursion(schema)))
    except (fastavro.schema.SchemaParseException, ValueError, TypeError, KeyError) as exc:
        raise SpecError.at("schema", f"not a valid Avro schema: {exc}") from None


_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


def refuse_recursion(schema: Any) -> Any:
    """``schema``, or ValueError if a named type refers to itself (a linked list, a tree).

    fastavro's compiled reader recurses per level without a bound: one value nested 100,000 deep crashes the
    process (a segmentation fault, not an exception). Druid's rows are flat records anyway.
    """
    def walk(node: Any, namespace: str, defining: tuple[str, ...]) -> None:
        if isinstance(node, str):
            full = node if "." in node else f"{namespace}.{node}".lstrip(".")
            if node not in _PRIMITIVES and (full in defining or node in {d.rsplit(".", 1)[-1] for d in defining}):
                raise ValueError(f"the type {node!r} contains itself (a recursive type); such values are not read")
        elif isinstance(node, list):
            for item in node:
                walk(item, namespace, defining)
        elif isinstance(node, dict):
            kind = node.get("type")
            if kind in ("record", "error", "enum", "fixed") and isinstance(node.get("name"), str):
                name = node["name"]
                namespace = name.rsplit(".", 1)[0] if "." in name else str(node.get("namespace", namespace))
                defining = (*defining, name if "." in name else f"{namespace}.{name}".lstrip("."))
                for field in node.get("fields", ()) if kind in ("record", "error") else ():
                    walk(field.get("type") if isinstance(field, dict) else None, namespace, defining)
            elif kind in ("array", "map"):
                walk(node.get("items" if kind == "array" else "values"), namespace, defining)
            else:
                walk(kind, namespace, defining)
    walk(schema, "", ())
    return schema


def without_logical_types(schema: Any) -> Any:
    """``schema`` without its ``logicalType`` annotations: Druid reads the underlying types."""
    if isinstance(schema, dict):
        return {key: without_logical_types(value) for key, value in schema.items() if key != "logicalType"}
    if isinstance(schema, list):
        return [without_logical_types(item) for item in schema]
    return schema


class InlineAvroSpec(SpecModel):
    """Druid's ``schema_inline`` decoder: every value is a datum of the schema given in the spec (no header)."""

    type: Literal["schema_inline"]
    """Decoder type."""
    avro_schema: dict[str, Any] = Field(alias="schema")
    """The writer's schema of every record value."""

    @model_validator(mode="after")
    def _valid_schema(self) -> InlineAvroSpec:
        parse_avro_schema(self.avro_schema)
        return self

    def task_json(self) -> dict[str, Any]:
        """What a task needs: the schema."""
        return {"type": "schema_inline", "schema": self.avro_schema}


AvroBytesDecoderSpec = Annotated[InlineAvroSpec | SchemaRegistrySpec, Field(discriminator="type")]
"""How an Avro value is decoded: with the spec's schema, or the registry's schema its header names."""
