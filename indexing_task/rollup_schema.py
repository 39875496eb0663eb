"""What the rollup needs from a spec's dataSchema: its dimensions, metrics and how records are read.

Discovery and multi-value dimensions change a schema as a task runs (:meth:`RollupSchema.with_dimensions`,
:meth:`RollupSchema.with_multi_value`); the rollup's SQL is built from it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal, NamedTuple

import pyarrow as pa

from segment_store.value_types import ValueType, arrow_type, wider_type
from specs import DataSchemaSpec
from specs.expressions import parse_expression, referenced_fields
from specs.filters import filter_columns
from specs.flatten import PathStep
from specs.granularity import Granularity
from specs.input_format import InputFormatSpec
from specs.sketch_aggregators import Sketch

__all__ = ["SEGMENT_START", "TIME", "DelimitedValues", "Dimension", "Metric", "MultiValueHandling", "RollupSchema"]

SEGMENT_START = "__segment_start"
TIME = "__time"

MultiValueHandling = Literal["SORTED_ARRAY", "SORTED_SET", "ARRAY"]


@dataclass(frozen=True)
class Dimension:
    """A dimension: a field grouped by, typed as the spec says."""

    name: str
    type: ValueType = "string"
    handling: MultiValueHandling = "SORTED_ARRAY"
    """How a JSON array for this string dimension becomes its values (Druid's ``multiValueHandling``)."""
    multi_value: bool = False
    """Stored as a list of strings: a record of the task held an array for it (see :meth:`Rollup.parse`)."""
    discovered: bool = False
    """Typed by schema discovery: the least restrictive type of its values so far (it may widen)."""


@dataclass(frozen=True)
class Metric:
    """An aggregator: ``kind`` over input ``fields`` (none for count, several for a cardinality sketch)."""

    name: str
    kind: Literal["count", "sum", "min", "max", "sketch", "first", "last"]
    fields: tuple[str, ...] = ()
    type: Literal["string", "long", "float", "double"] = "long"
    """The type the inputs are read as."""
    filter_json: str | None = None
    """A filtered aggregator's Druid filter, as JSON text: only records it matches are aggregated."""
    sketch: Sketch | None = None
    """What a sketch aggregator stores (see :mod:`specs.sketch_aggregators`)."""
    by_row: bool = False
    """A cardinality sketch of each record's combination of the fields' values."""
    max_chars: int = 1024
    """stringFirst/stringLast: values are cut to this many characters (Druid's ``maxStringBytes``)."""

    @property
    def complex_kind(self) -> str | None:
        """How the column is stored if not as a plain value (segment descriptors record it, queries read it).

        A :class:`Sketch` as text, or ``pair:<type>``, first/last's (time, value) pair; None for a plain value.
        """
        if self.sketch is not None:
            return str(self.sketch)
        return f"pair:{self.type}" if self.kind in ("first", "last") else None


class DelimitedValues(NamedTuple):
    """How a CSV or TSV value is read: one line of ``columns`` split at ``separator`` (CSV: with quotes)."""

    columns: tuple[str, ...]
    separator: str
    quoted: bool
    list_delimiter: str


@dataclass(frozen=True)
class RollupSchema:
    """What the rollup needs from a spec's dataSchema (see :meth:`from_spec`)."""

    timestamp_column: str
    timestamp_format: str
    dimensions: tuple[Dimension, ...]
    metrics: tuple[Metric, ...]
    query_granularity: Granularity
    segment_granularity: Granularity
    rollup: bool = True
    missing_timestamp: str | None = None
    filter_json: str | None = None
    """The transformSpec's Druid filter, as JSON text: records it does not keep are thrown away."""
    transforms: tuple[tuple[str, str], ...] = ()
    """The transformSpec's expression transforms, (name, expression): fields computed from the record."""
    input_paths: tuple[tuple[str, tuple[PathStep, ...] | None], ...] = ()
    """Input fields not read from the top-level key of their name (a flattenSpec): the path to
    their value, or None where the record does not offer them."""
    metadata: tuple[tuple[str, str], ...] = ()
    """Input fields read from the Kafka record rather than its value: (name, source), the source as
    ``InputFormatSpec.metadata_source`` names it."""
    discover: bool = False
    """Every top-level field of a record not in ``discovery_exclusions`` is a dimension too: a string one,
    or with ``discover_types`` one typed by its values (``useSchemaDiscovery``)."""
    discover_types: bool = False
    """Discovered dimensions are typed by their values (``useSchemaDiscovery``)."""
    nested_fields: tuple[str, ...] = ()
    """Typed discovery: fields seen holding a JSON array or object; a record holding one there is unparseable."""
    discovery_exclusions: tuple[str, ...] = ()
    """Fields discovery leaves out: the timestamp, the metrics' names and inputs, ``dimensionExclusions``."""
    case_clashes: tuple[str, ...] = ()
    """Discovered fields whose names differ only in case from a column's: a record holding one is unparseable."""
    delimited: DelimitedValues | None = None
    """CSV or TSV values (None: JSON)."""
    decoder: str | None = None
    """Avro or Protobuf values: how they are decoded to JSON text (JSON, see :mod:`indexing_task.value_decoders`;
    None: JSON, CSV or TSV values)."""

    @classmethod
    def from_spec(cls, data_schema: DataSchemaSpec, input_format: InputFormatSpec | None = None) -> RollupSchema:
        """Build from a ``specs.DataSchemaSpec`` and the ``inputFormat`` (its flattenSpec, Kafka metadata)."""
        fmt = input_format or InputFormatSpec()
        value = fmt.value_spec
        flatten = value.flatten_spec
        delimited = (DelimitedValues(value.columns, value.separator, value.type == "csv", value.list_delimiter)
                     if value.type in ("csv", "tsv") else None)
        ts = data_schema.timestamp_spec
        gran = data_schema.granularity_spec
        missing = ts.missing_value
        filter_spec = data_schema.transform_spec.filter
        dims = data_schema.dimensions_spec
        metrics = data_schema.metrics_spec
        transforms = data_schema.transform_spec.transforms
        excluded = (ts.column, *(m.name for m in metrics), *(f for m in metrics for f in m.input_fields),
                    *dims.dimension_exclusions)
        dimensions = tuple(Dimension(d.name, d.type, d.multi_value_handling or "SORTED_ARRAY")
                           for d in dims.dimensions)
        columns = fmt.metadata_columns if fmt.type == "kafka" else {}
        always = [*(f.name for f in flatten.fields), *(delimited.columns if delimited else ()),
                  *(columns[k] for k in ("timestamp", "topic") if k in columns),
                  *([columns["key"]] if columns and fmt.key_format is not None else [])]
        always = always if dims.discovers else []
        kafka_time = columns.get("timestamp") if dims.use_schema_discovery else None  # typed: a LONG
        dimensions += tuple(Dimension(name, "long" if name == kafka_time else "string",
                                      discovered=dims.use_schema_discovery)
                            for name in sorted(set(always) - set(excluded) - set(dims.names))
                            if not name.startswith("__"))  # these fields exist in every record
        names = [ts.column, *(d.name for d in dimensions), *filter_columns(filter_spec),
                 *(f for m in metrics for f in m.input_fields),
                 *(f for m in metrics for f in filter_columns(m.filter)),
                 *(f for t in transforms for f in referenced_fields(parse_expression(t.expression)))]
        metadata = {name: source for name in names if (source := fmt.metadata_source(name)) is not None}
        if fmt.key_format is not None:  # the key's source carries its separator: key:<format>:<separator>
            metadata = {name: f"{source}:{fmt.key_format.separator}" if source.startswith("key:") else source
                        for name, source in metadata.items()}
        located = {name: flatten.path_of(name) for name in names if name not in metadata}
        return cls(
            timestamp_column=ts.column,
            timestamp_format=ts.format,
            dimensions=dimensions,
            metrics=tuple(Metric(m.name, m.kind, m.input_fields, _metric_type(m.base.type, m.sketch),
                                 None if m.filter is None else json.dumps(m.filter), m.sketch, bool(m.base.by_row),
                                 1024 if m.base.max_string_bytes is None else m.base.max_string_bytes)
                          for m in metrics),
            query_granularity=gran.query_granularity,
            segment_granularity=gran.segment_granularity,
            rollup=gran.rollup,
            missing_timestamp=missing.isoformat() if isinstance(missing, datetime) else missing,
            filter_json=None if filter_spec is None else json.dumps(filter_spec),
            transforms=tuple((t.name, t.expression) for t in transforms),
            input_paths=tuple((name, path) for name, path in located.items() if path != (name,)),
            metadata=tuple(metadata.items()),
            discover=dims.discovers and flatten.use_field_discovery and delimited is None,
            discover_types=dims.use_schema_discovery,
            discovery_exclusions=tuple(dict.fromkeys(excluded)),
            delimited=delimited,
            decoder=_decoder_json(value, names),
        )

    @property
    def metadata_needs(self) -> list[str]:
        """What of each Kafka record the parse reads besides its value.

        Key, timestamp, topic, header:<name>, and the offset where first/last metrics break ties by it.
        """
        needs = ["key" if source.startswith("key:") else source for _, source in self.metadata]
        return list(dict.fromkeys([*needs, *(["offset"] if self.has_pairs else [])]))

    @property
    def has_pairs(self) -> bool:
        """Whether a metric is a first/last pair."""
        return any(m.kind in ("first", "last") for m in self.metrics)

    def with_dimensions(self, found: Iterable[str] | Mapping[str, str], nested: Iterable[str] = ()) -> RollupSchema:
        """This schema with discovered dimensions added (those it lists or excludes are skipped).

        ``found`` holds names (string dimensions), or name -> type (typed discovery: a dimension
        discovered before widens to the least restrictive of its type and the new one).
        ``nested`` names fields typed discovery saw holding an array or object.
        """
        typed = isinstance(found, Mapping)
        types: Mapping[str, str] = found if isinstance(found, Mapping) else dict.fromkeys(found, "string")
        columns = {name.lower(): name for name in [*(d.name for d in self.dimensions), *(m.name for m in self.metrics)]}
        discovered = {d.name: d for d in self.dimensions if d.discovered}
        excluded = set(self.discovery_exclusions)

        def skipped(name: str) -> bool:
            return not name or name.startswith("__") or name in excluded

        new: dict[str, Dimension] = {}
        clashes = []
        for name, found_type in types.items():
            if skipped(name):
                continue
            if columns.get(name.lower(), name) != name:  # one column to DuckDB and Spark: its records are refused
                clashes.append(name)
            elif name in discovered:
                wider = wider_type(discovered[name].type, found_type)
                if wider != discovered[name].type:
                    new[name] = replace(discovered[name], type=wider)  # type: ignore[arg-type]
            elif name not in columns:  # else a listed dimension or a metric: its own type stands
                columns[name.lower()] = name
                new[name] = Dimension(name, found_type, discovered=typed)  # type: ignore[arg-type]
        nested_fields = tuple(dict.fromkeys([*self.nested_fields, *(
            name for name in nested if not skipped(name) and (name in discovered or name in new
                                                             or name.lower() not in columns))]))
        if not new and set(clashes) <= set(self.case_clashes) and nested_fields == self.nested_fields:
            return self
        kept = tuple(new.pop(d.name, d) for d in self.dimensions)
        return replace(self, dimensions=kept + tuple(new.values()), nested_fields=nested_fields,
                       case_clashes=tuple(dict.fromkeys([*self.case_clashes, *clashes])))

    def with_multi_value(self, names: Iterable[str]) -> RollupSchema:
        """This schema with string dimensions ``names`` stored as lists of strings from now on."""
        names = set(names)
        return replace(self, dimensions=tuple(replace(d, multi_value=True) if d.name in names else d
                                              for d in self.dimensions))

    @property
    def arrow_types(self) -> dict[str, pa.DataType]:
        """The Arrow type of every output column but ``__time``, as written to segments."""
        def metric_type(m: Metric) -> pa.DataType:
            if m.sketch is not None:
                return pa.binary()
            if m.kind in ("first", "last"):
                return pa.struct([("lhs", pa.int64()), ("rhs", arrow_type(m.type)), ("offset", pa.int64())])
            return arrow_type("long" if m.kind == "count" else m.type)
        return {**{d.name: pa.list_(pa.string()) if d.multi_value else arrow_type(d.type) for d in self.dimensions},
                **{m.name: metric_type(m) for m in self.metrics}}

    @property
    def discovered_types(self) -> dict[str, str]:
        """Typed discovery's dimensions and their types (segment descriptors record them, queries widen by them)."""
        return {d.name: d.type for d in self.dimensions if d.discovered}

    @property
    def complex_columns(self) -> dict[str, str]:
        """The columns that are not plain values: name -> :attr:`Metric.complex_kind`, or ``multi_value``."""
        return {**{d.name: "multi_value" for d in self.dimensions if d.multi_value},
                **{m.name: kind for m in self.metrics if (kind := m.complex_kind) is not None}}

    @property
    def output_columns(self) -> list[str]:
        """The columns of a rollup's rows, in order: ``__time``, the dimensions, the metrics."""
        return [TIME, *(d.name for d in self.dimensions), *(m.name for m in self.metrics)]


def _metric_type(druid_type: str, sketch: Sketch | None) -> Literal["string", "long", "float", "double"]:
    if sketch is not None:
        return "double" if sketch.family == "kll" else "string"
    if druid_type.startswith("string"):
        return "string"
    if druid_type.startswith("double"):
        return "double"
    if druid_type.startswith("float"):
        return "float"
    return "long"


def _decoder_json(value: InputFormatSpec, names: Iterable[str]) -> str | None:
    """How ``value``'s Avro or Protobuf values are decoded (a ``file`` descriptor is read here), or None."""
    decoder = value.avro_bytes_decoder or value.proto_bytes_decoder
    if decoder is None:
        return None
    return json.dumps({"format": "avro" if value.type == "avro_stream" else "protobuf",
                       "binaryAsString": value.binary_as_string, "decoder": decoder.task_json(),
                       "names": sorted(set(names))}, sort_keys=True)
