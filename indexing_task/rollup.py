"""Parse JSON records in bulk and roll them up, with DuckDB over Arrow.

One SQL query per batch of raw record values types every field, gives each bad record a
reason (invalid JSON, missing or invalid timestamp, wrong type) and groups the good rows by
(segment interval, truncated time, dimensions), aggregating the metrics; nothing is
materialised in between (bad records come out of the same pass, one row each).
String dimensions take any JSON scalar as text (``true``, ``12``), like Druid; a JSON array makes the
dimension multi-value (a list column, never the array's text; an object is kept as its JSON text,
where Druid keeps Java's rendering of it). Sketch metrics come out of the pass as lists of values
that :mod:`indexing_task.sketch_columns` turns into sketches; first/last metrics as (time, value) pairs.
Partial results of several batches merge with the metrics' combining functions.
"""

from __future__ import annotations

import functools
import json
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp

from indexing_task.avro_values import AvroValues
from indexing_task.buckets import bucket_end_sql, bucket_start_sql
from indexing_task.sketch_columns import build_sketches, merge_sketches
from indexing_task.sql_text import quote_identifier as _q
from indexing_task.sql_text import quote_string as _lit
from indexing_task.transforms import compile_expression, create_macros
from segment_store.value_types import ValueType, arrow_type, wider_type
from specs import DataSchemaSpec
from specs.expressions import parse_expression, referenced_fields
from specs.filters import filter_columns, filter_condition
from specs.flatten import PathStep
from specs.granularity import ALL_END, ALL_START, Granularity
from specs.input_format import InputFormatSpec
from specs.sketch_aggregators import Sketch

__all__ = ["BadRecord", "Dimension", "Metric", "ParsedBatch", "Rollup", "RollupSchema", "bucket_end_sql",
           "bucket_start_sql", "widened"]

SEGMENT_START = "__segment_start"
TIME = "__time"
MIN_TIME, MAX_TIME = ALL_START, ALL_END
"""Event times outside ``[MIN_TIME, MAX_TIME)`` (UTC) are unparseable: the range every granularity's
buckets, Arrow, Parquet and Python's datetime all hold (``ALL`` granularity's interval)."""
_STATUS_KEYS = ("__status", "CASE WHEN __status = 1 THEN __i END AS __bad_i",
                "CASE WHEN __status = 1 THEN __reason END AS __reason")
_AUX_COLUMNS = ["__status", "__bad_i", "__reason", "__n"]
_SAMPLE_LIMIT = 20
_SQL_TYPES = {"string": "VARCHAR", "long": "BIGINT", "float": "FLOAT", "double": "DOUBLE"}


MultiValueHandling = Literal["SORTED_ARRAY", "SORTED_SET", "ARRAY"]
_JSON_TYPES = {"BOOLEAN": "long", "BIGINT": "long", "UBIGINT": "long", "DOUBLE": "double", "VARCHAR": "string"}
"""The discovered type of a DuckDB ``json_each`` value type (booleans are 1/0, as Druid's strict booleans)."""


def widened(column: pa.Array | pa.ChunkedArray, to: pa.DataType) -> pa.Array | pa.ChunkedArray:
    """A discovered column cast to a wider type.

    A double becomes the text Spark's cast gives it (``1.0E20``, see ``java_double``), so a
    column widened here (within a task, by compaction) reads as one a query widens.
    """
    if to == pa.string() and column.type == pa.float64():
        cursor = _database().cursor()
        try:
            cursor.register("doubles", pa.table({"v": column}))
            return arrow_query(cursor, "SELECT java_double(v) AS v FROM doubles").column("v")
        finally:
            cursor.close()
    return column.cast(to)


_MACROS = {
    "java_double": ("x", "CASE WHEN x = 0 OR (abs(x) >= 0.001 AND abs(x) < 10000000) THEN x::VARCHAR "
                         "ELSE (CASE WHEN x < 0 THEN '-' ELSE '' END) || java_sci(split_part(abs(x)::VARCHAR, 'e', 1), "
                         "coalesce(try_cast(split_part(abs(x)::VARCHAR, 'e', 2) AS INTEGER), 0)) END"),
    "java_sci": ("m, e", "java_sci_digits(rtrim(ltrim(replace(m, '.', ''), '0'), '0'), "
                         "length(split_part(m, '.', 1)) - 1 + e "
                         "- (length(replace(m, '.', '')) - length(ltrim(replace(m, '.', ''), '0'))))"),
    "java_sci_digits": ("d, e", "left(d, 1) || '.' || CASE WHEN length(d) > 1 THEN substr(d, 2) ELSE '0' END "
                                "|| 'E' || e"),
}
"""``java_double(x)``: a double as Java's ``Double.toString`` (and so Spark's cast) writes it: DuckDB's
shortest digits, in ``E`` notation outside [1e-3, 1e7) (``1.0E20``, ``1.23456789E8``, ``1.0E-4``)."""



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
    avro: tuple[str, bool] | None = None
    """Avro values: the inline schema (JSON text) and ``binaryAsString`` (None: not Avro)."""

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
            avro=None if value.avro_bytes_decoder is None else (
                json.dumps(value.avro_bytes_decoder.avro_schema, sort_keys=True), value.binary_as_string),
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


def _sketch_inputs(column: str, family: str, rollup: bool, combine: bool) -> str:
    """SQL for a row's list of sketch inputs: values (distinct for theta and HLL), or sketches to merge."""
    if combine:
        return f"list({column})"
    if family == "kll":
        return f"list_filter({f'list({column})' if rollup else f'[{column}]'}, lambda v: v IS NOT NULL)"
    return f"list_distinct({f'flatten(list({column}))' if rollup else column})"


def _pair_sql(i: int, value: str, m: Metric) -> tuple[str, str | None]:
    """First/last metric ``i``'s (time, value, offset) pair, as a column of the parse, and its type check (if any).

    A string is cut to ``max_chars`` and a null one is skipped (no pair), as Druid's string
    first/last do at ingestion; a null number is kept (the earliest value may be null).
    """
    offset = _metadata_column("offset")
    if m.type == "string":
        cut = f"left({value}, {m.max_chars})"
        return (f"CASE WHEN {value} IS NOT NULL THEN {{'lhs': epoch_ms(__t), 'rhs': {cut}, 'offset': {offset}}} END",
                None)
    skipped = f"__mf{i} AND " if m.filter_json is not None else ""
    return (f"{{'lhs': epoch_ms(__t), 'rhs': {_cast(value, _SQL_TYPES[m.type])}, 'offset': {offset}}}",
            f"WHEN {skipped}{value} IS NOT NULL AND __m{i}.rhs IS NULL "
            f"THEN {_lit('wrong type for ' + m.fields[0] + ' (' + m.type + ')')}")


def _pair_order(pair: str) -> str:
    """SQL for the order of first/last pairs (NULL for no pair).

    The time, then the offset (on equal times the later record is the last, as in Druid), then a
    null value before any other, then the value (equal times and offsets in two partitions).
    Queries order pairs the same way (:mod:`overlord.query.druid_functions`); pairs written before
    offsets were stored have offset -1.
    """
    return (f"CASE WHEN {pair} IS NOT NULL THEN {{'t': struct_extract({pair}, 'lhs'), "
            f"'o': coalesce(struct_extract({pair}, 'offset'), -1), 'n': struct_extract({pair}, 'rhs') IS NOT NULL, "
            f"'v': struct_extract({pair}, 'rhs')}} END")


def _nested_reason(field: str) -> str:
    """The parse's reason for a JSON array or object where typed schema discovery reads a field."""
    return (f"field {field} holds a JSON array or object: useSchemaDiscovery would make it an ARRAY or "
            "COMPLEX<json> column, which is not supported (list it as a string dimension for a multi-value one)")


def _array_reason(dimension: str) -> str:
    """The parse's reason for a JSON array in a single-valued string dimension (:meth:`Rollup.parse` acts on it)."""
    return f"a JSON array for string dimension {dimension}"


def _elements(token: str, text: str) -> str:
    """SQL for a field's values as a list of text: a JSON array's elements, else its one value (``text``)."""
    return f"CASE WHEN left({token}, 1) = '[' THEN from_json({token}, '[\"VARCHAR\"]') ELSE [{text}] END"


def _multi_value_sql(token: str, text: str, d: Dimension) -> tuple[str, str]:
    """A multi-value dimension's list of strings from its JSON ``token``, and the check for nested values.

    As Druid: each array element as text (a scalar, a one-element list), sorted with nulls first
    (``SORTED_ARRAY``), also without repeats (``SORTED_SET``), or as it came (``ARRAY``); an
    empty array, ``[null]`` and a missing field are all a null row.
    """
    values = _elements(token, text)
    if d.handling == "SORTED_ARRAY":
        values = f"list_sort({values}, 'ASC', 'NULLS FIRST')"
    elif d.handling == "SORTED_SET":  # list_distinct drops nulls; one is kept, as Druid keeps one
        values = (f"list_sort(list_distinct({values}) || CASE WHEN list_contains(list_transform({values}, "
                  f"lambda v: v IS NULL), true) THEN [NULL::VARCHAR] ELSE [] END, 'ASC', 'NULLS FIRST')")
    row = f"CASE WHEN {token} IS NULL OR len(__v) = 0 OR __v = [NULL::VARCHAR] THEN NULL ELSE __v END"
    nested = (f"WHEN left({token}, 1) = '[' AND list_bool_or(list_transform(from_json({token}, '[\"JSON\"]'), "
              f"lambda v: json_type(v) IN ('ARRAY', 'OBJECT'))) "
              f"THEN {_lit(f'a nested array or object in multi-value dimension {d.name}')}")
    return row.replace("__v", f"({values})"), nested


def _cast(text: str, sql_type: str) -> str:
    if sql_type == "VARCHAR":
        return text
    if sql_type == "BIGINT":  # Druid truncates fractional input to long
        return (f"CASE WHEN contains({text}, '.') OR contains({text}, 'e') OR contains({text}, 'E') "
                f"THEN try_cast(trunc(try_cast({text} AS DOUBLE)) AS BIGINT) "
                f"ELSE try_cast({text} AS BIGINT) END")
    return f"try_cast({text} AS {sql_type})"


def _wrapped_long(expr: str) -> str:
    """Return SQL for a sum as a 64-bit long that wraps around on overflow, as Druid's (Java's) long sums do."""
    wrapped = f"(((({expr})::HUGEINT + {2**63}) % {2**64} + {2**64}) % {2**64} - {2**63})"
    return f"coalesce(try_cast({expr} AS BIGINT), {wrapped})"  # the arithmetic only where it overflowed


def _filter_sql(filter_spec: object, text: Callable[[str], str]) -> str:
    """DuckDB SQL of a Druid filter over fields as their ``text`` SQL gives them, and ``__time`` as ``__t``."""
    def column(name: str) -> exp.Expression:
        return exp.column("__t") if name == TIME else sqlglot.parse_one(text(name), read="duckdb")  # type: ignore[return-value]
    return filter_condition(filter_spec, column).sql(dialect="duckdb")


_CSV_FIELD = '"(?:[^"]|"")*"|[^,"]*'
"""One CSV field: quoted (a quote doubled inside), or up to the next comma."""


def _values_sql(carried: str, delimited: DelimitedValues | None, decoded: bool = False) -> str:
    """The ``src`` CTE: each record's value as JSON text ``__s``, and ``__problem``, why a value is unreadable.

    A CSV or TSV line becomes a JSON object of its columns' texts (empty ones null, as in Druid;
    one holding the ``listDelimiter``, a JSON array of its parts: a multi-value dimension), so the
    rest of the parse reads every format alike. ``decoded``: the batch holds values already
    decoded to JSON (Avro) and their ``__problem``.
    """
    if delimited is None:
        problem = "__problem" if decoded else "NULL::VARCHAR AS __problem"
        return f"src AS (SELECT {carried}, __raw IS NULL AS __is_null, {problem}, try(decode(__raw)) AS __s FROM batch)"
    if delimited.quoted:  # a line without quotes (the usual one) is only split, as TSV
        cells = (f"CASE WHEN contains(__line, '\"') THEN regexp_extract_all(',' || __line, "
                 f"{_lit(',(' + _CSV_FIELD + ')')}, 1) ELSE string_split(__line, ',') END")
        unquoted = "CASE WHEN starts_with(c, '\"') THEN replace(c[2:-2], '\"\"', '\"') ELSE c END"
        malformed = (f"WHEN contains(__line, '\"') AND NOT regexp_full_match(__line, "
                     f"{_lit(f'(?:{_CSV_FIELD})(?:,(?:{_CSV_FIELD}))*')}) "
                     "THEN 'not a line of comma-separated values (a quote inside a value must be doubled, and the "
                     "value quoted)'")
    else:
        cells = f"string_split(__line, {_lit(delimited.separator)})"
        unquoted, malformed = "c", ""
    pairs = ", ".join(f"{_lit(name)}, __cells[{i}]" for i, name in enumerate(delimited.columns, 1))
    split = _lit(delimited.list_delimiter)
    listed = ", ".join(f"{_lit(name)}, CASE WHEN contains(__cells[{i}], {split}) THEN to_json(list_transform("
                       f"string_split(__cells[{i}], {split}), lambda p: nullif(p, ''))) ELSE to_json(__cells[{i}]) END"
                       for i, name in enumerate(delimited.columns, 1))
    return f"""lines AS (SELECT {carried}, __raw IS NULL AS __is_null,
                             regexp_replace(try(decode(__raw)), '\\r?\\n$', '') AS __line FROM batch),
            cells AS (SELECT *, list_transform({cells}, lambda c: nullif({unquoted}, '')) AS __cells FROM lines),
            checked AS (SELECT *, CASE WHEN __line IS NULL THEN NULL
                                       WHEN regexp_matches(__line, '[\\r\\n]')
                                           THEN 'several lines in one value (Druid reads each as a row)'
                                       {malformed}
                                  END AS __problem FROM cells),
            src AS (SELECT {carried}, __is_null, __problem,
                           CASE WHEN __line IS NULL OR __problem IS NOT NULL THEN NULL
                                WHEN list_bool_or(list_transform(__cells, lambda c: contains(c, {split})))
                                    THEN json_object({listed})
                                ELSE json_object({pairs}) END AS __s
                    FROM checked)"""


def as_multi_value(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A string column as a multi-value one: each value a one-element list (null stays null); lists as they are."""
    if pa.types.is_list(column.type):
        return column
    return pa.array([None if v is None else [v] for v in column.to_pylist()], type=pa.list_(pa.string()))


def _metadata_column(source: str) -> str:
    """The batch column holding a Kafka record's metadata ``source`` (the key, a header, ...)."""
    return "__kafka_" + ("key" if source.startswith("key") else source)


def _metadata_text(source: str, column: str) -> str:
    """SQL for a metadata field's text: the key's first column, the timestamp in ms, the topic, a header."""
    if source.startswith("key:"):
        return f"split_part(try(decode({column})), {_lit(source.split(':', 2)[2])}, 1)"
    if source == "timestamp":
        return f"{column}::VARCHAR"
    return column if source == "topic" else f"try(decode({column}))"


def _extract(function: str, paths: dict[str, str]) -> str:
    """SQL extracting the values at ``paths`` from ``__s`` as a list (NULL when there are none)."""
    return f"{function}(__s, [{', '.join(map(_lit, paths.values()))}])" if paths else "NULL"


def _json_path(steps: tuple[PathStep, ...]) -> str:
    """DuckDB's JSON path for ``steps`` (keys quoted; ``[#-1]`` is the last array element)."""
    def step(key: PathStep) -> str:
        if isinstance(key, int):
            return f"[{key}]" if key >= 0 else f"[#{key}]"
        return '."' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return "$" + "".join(map(step, steps))


def _text(value: bytes | None) -> str:
    """Decode a record value for a bad-record sample ('' for a null value or invalid UTF-8)."""
    if value is None:
        return ""
    try:
        return value.decode()
    except UnicodeDecodeError:
        return ""


def _timestamp_sql(text: str, fmt: str) -> str:
    iso = f"try_cast({text} AS TIMESTAMPTZ)::TIMESTAMP"
    number = f"try_cast({text} AS BIGINT)"
    by_format = {
        "iso": iso,
        "millis": f"try(epoch_ms({number}))",
        "posix": f"try(to_timestamp(try_cast({text} AS DOUBLE))::TIMESTAMP)",
        "micro": f"try(make_timestamp({number}))",
        "nano": f"try(make_timestamp({number} // 1000))",
        "auto": f"CASE WHEN {number} IS NOT NULL THEN try(epoch_ms({number})) ELSE {iso} END",
    }
    return by_format[fmt]


@dataclass(frozen=True)
class BadRecord:
    """A record that was skipped, by its index in the batch."""

    index: int
    reason: str
    value: str


@dataclass(frozen=True)
class ParsedBatch:
    """The outcome of one batch: its rolled-up rows and the records it could not use."""

    rows: pa.Table
    bad_count: int
    bad_samples: tuple[BadRecord, ...]
    thrown_away: int


_local = threading.local()


def arrow_query(con: duckdb.DuckDBPyConnection, sql: str, params: Mapping[str, Any] | None = None) -> pa.Table:
    """``sql``'s rows as an Arrow table, binding and planning it once.

    ``con.sql(...).to_arrow_table()`` binds a statement twice (the relation's schema, then the run):
    ~10 ms more on every parse of a trickle's small batch, a fifth of a small task's CPU.
    """
    con.execute(sql, dict(params) if params else None)
    reader = None
    try:
        reader = con.to_arrow_reader()
        assert reader is not None, "a result just run is not used up"  # None is for one a fetch has emptied
        return reader.read_all()
    except BaseException:
        if reader is not None:
            reader.close()  # a reader holds the connection until it is read out or closed
        con.abort()  # else the connection refuses its next register or unregister (an unfinished result)
        raise


warnings.filterwarnings("ignore", "Arrow output on a DB-API result", UserWarning, r"indexing_task\.rollup")
""":func:`arrow_query`'s copy is of a rollup's rows (a batch's fraction): cheaper than the second bind it saves."""


def _database() -> duckdb.DuckDBPyConnection:
    """Return this thread's in-memory DuckDB database, opened once: opening one costs ~40 ms, a cursor ~0."""
    database = getattr(_local, "database", None)
    if database is None:
        database = _local.database = duckdb.connect(config={"threads": 1, "memory_limit": "1GB"})
        create_macros(database)
        for name, (params, body) in reversed(_MACROS.items()):  # each after the ones it calls
            database.execute(f"CREATE OR REPLACE MACRO {name}({params}) AS {body}")
    return database


class Rollup:
    """Parses and rolls up batches of raw JSON values against one schema (one DuckDB cursor).

    Records whose event time (before truncation) is outside ``[min_time, max_time]`` are thrown away.

    The cursor belongs to its thread's database, which Rollups created one after another
    (the splits a Spark Python worker runs) share.
    """

    def __init__(self, schema: RollupSchema, min_time: datetime | None = None,
                 max_time: datetime | None = None) -> None:
        self._con = _database().cursor()
        self._con.execute("SET TimeZone = 'UTC'")
        self._bounds = self._bounds_sql(min_time, max_time)
        self._avro = None if schema.avro is None else AvroValues(*schema.avro)
        self._use(schema)

    def _use(self, schema: RollupSchema) -> None:
        """Parse with ``schema`` from now on (discovery adds dimensions to it)."""
        self.schema = schema
        classified = (f"(SELECT *, CASE WHEN __reason IS NOT NULL THEN 1 "
                      f"WHEN NOT __kept OR NOT ({self._bounds}) THEN 2 ELSE 0 END "
                      f"AS __status FROM ({self._build_parse_sql()}))")
        self._parse_query = self._aggregate_sql(classified, combine=False, status=True)

    def _discover(self) -> None:
        """Add the batch's top-level fields not seen before as dimensions (``batch`` is registered).

        String discovery takes every field but nested objects; typed discovery types each by the
        least restrictive type of its values here, and notes the fields holding arrays or objects.
        No field that is only ever null is discovered (as in Druid).
        """
        found = self._con.execute(  # an integer past BIGINT is a double, as Druid parses it
            "SELECT key, list(DISTINCT CASE WHEN type = 'UBIGINT' AND try_cast(value AS BIGINT) IS NULL "
            "THEN 'DOUBLE' ELSE type END) FROM (SELECT try(decode(__raw)) AS __s FROM batch) AS b, json_each(b.__s) "
            "WHERE coalesce(json_valid(__s) AND starts_with(ltrim(__s), '{'), false) AND type <> 'NULL' "
            "GROUP BY key ORDER BY key").fetchall()
        if self.schema.discover_types:
            types = {key: functools.reduce(wider_type, scalars) for key, kinds in found
                     if (scalars := [_JSON_TYPES[k] for k in kinds if k in _JSON_TYPES])}
            nested = [key for key, kinds in found if {"ARRAY", "OBJECT"} & set(kinds)]
            schema = self.schema.with_dimensions(types, nested)
        else:
            schema = self.schema.with_dimensions([key for key, kinds in found if kinds != ["OBJECT"]])
        if schema is not self.schema:
            self._use(schema)

    def close(self) -> None:
        """Close this rollup's cursor (the thread's database stays open for the next one)."""
        self._con.close()

    def _build_parse_sql(self) -> str:
        s = self.schema
        filter_spec = None if s.filter_json is None else json.loads(s.filter_json)
        transforms = {name: parse_expression(text) for name, text in s.transforms}
        outputs = {name: f'"__x{i}"' for i, name in enumerate(transforms)}  # each transform's JSON token
        metric_filters = {i: json.loads(m.filter_json) for i, m in enumerate(s.metrics) if m.filter_json is not None}
        filtered = [name for f in (filter_spec, *metric_filters.values()) for name in filter_columns(f)]
        needed = [*(d.name for d in s.dimensions), *(f for m in s.metrics for f in m.fields),
                  *(name for name in filtered if name != TIME)]
        located = dict(s.input_paths)

        def offered(names: Iterable[str]) -> dict[str, str]:
            """The JSON paths of the ``names`` a record offers (by its flattenSpec), in order."""
            steps = {name: located.get(name, (name,)) for name in dict.fromkeys(names)}
            return {name: _json_path(path) for name, path in steps.items() if path is not None}

        metadata = {name: (source, _q(_metadata_column(source))) for name, source in s.metadata}
        paths = offered(n for n in [s.timestamp_column, *(n for n in needed if n not in outputs)] if n not in metadata)
        inputs = [f for e in transforms.values() for f in referenced_fields(e) if f != TIME]
        counted = [*(f for m in s.metrics if m.type == "string" and m.sketch is not None for f in m.fields),
                   *(d.name for d in s.dimensions if d.multi_value)]
        tokens = offered(f for f in [*inputs, *(f for f in counted if f not in outputs)] if f not in metadata)
        index, token_index = ({name: i for i, name in enumerate(p, 1)} for p in (paths, tokens))

        def raw(name: str) -> str:
            """SQL for an input field's value as text; NULL where the record does not offer it."""
            if name in metadata:
                return _metadata_text(*metadata[name])
            return f"__f[{index[name]}]" if name in index else "NULL::VARCHAR"

        def text(name: str) -> str:
            """SQL for a field's value as text, as dimensions, metrics and the filter see it (transformed)."""
            return f"d_str({outputs[name]})" if name in outputs else raw(name)

        def token(name: str) -> str:
            if name in metadata:  # the timestamp is a LONG, the key, topic and headers strings
                text = raw(name)
                return f"{text}" if metadata[name][0] == "timestamp" else f"d_quote({text})"
            return f"nullif(__j[{token_index[name]}], 'null')" if name in token_index else "NULL::VARCHAR"

        extract = [f"CASE WHEN __ok THEN {_extract('json_extract_string', paths)} END AS __f"]
        if tokens:
            extract.append(f"CASE WHEN __ok THEN {_extract('json_extract', tokens)}::VARCHAR[] END AS __j")
        computed = [f"{compile_expression(expr, token, 'epoch_ms(__t)')} AS {outputs[name]}"
                    for name, expr in transforms.items()]
        ts_text = raw(s.timestamp_column)
        if s.missing_timestamp is not None:
            ts_text = f"coalesce({ts_text}, {_lit(s.missing_timestamp)})"
        typed: list[str] = []
        checks: list[str] = []
        arrays: list[str] = []
        for name in s.nested_fields:  # first: its value fails any other check too
            checks.append(f"WHEN json_type(__s, {_lit(_json_path((name,)))}) IN ('ARRAY', 'OBJECT') THEN "
                          f"{_lit(_nested_reason(name))}")
        for d in s.dimensions:
            value = text(d.name)
            if d.discovered and d.type != "string":  # strict booleans: true is 1
                value = f"CASE {value} WHEN 'true' THEN '1' WHEN 'false' THEN '0' ELSE {value} END"
            elif d.discovered and d.name in paths:  # as a value of another batch would be widened to text
                kind = f"json_type(__s, {_lit(paths[d.name])})"
                value = (f"CASE {kind} WHEN 'BOOLEAN' THEN CASE {value} WHEN 'true' THEN '1' ELSE '0' END "
                         f"WHEN 'DOUBLE' THEN java_double({value}::DOUBLE) ELSE {value} END")
            single_path = d.type == "string" and not d.multi_value and not d.discovered and d.name in paths \
                and d.name not in outputs
            if single_path:  # as in Druid, an array of at most one value is that value (or null)
                kind, first = f"json_type(__s, {_lit(paths[d.name])})", _lit(paths[d.name] + "[0]")
                value = (f"CASE WHEN left({value}, 1) = '[' AND {kind} = 'ARRAY' "
                         f"THEN json_extract_string(__s, {first}) ELSE {value} END")
            if d.multi_value:
                values, check = _multi_value_sql(outputs.get(d.name) or token(d.name), value, d)
                typed.append(f"{values} AS {_q(d.name)}")
                checks.append(check)
                continue
            typed.append(f"{_cast(value, _SQL_TYPES[d.type])} AS {_q(d.name)}")
            if d.type != "string":
                checks.append(f"WHEN {value} IS NOT NULL AND {_q(d.name)} IS NULL "
                              f"THEN {_lit('wrong type for ' + d.name + ' (' + d.type + ')')}")
            elif d.name in outputs:  # transforms' values are JSON tokens: an array or object shows at once
                checks.append(f"WHEN left({outputs[d.name]}, 1) IN ('[', '{{') THEN "
                              f"{_lit(f'transform {d.name} gave a JSON array or object, not a string')}")
            elif single_path:  # an array of several values: the parse starts again, the dimension multi-value
                path = paths[d.name]
                arrays.append(f"WHEN left({text(d.name)}, 1) = '[' AND json_type(__s, {_lit(path)}) = 'ARRAY' "
                              f"AND (json_array_length(__s, {_lit(path)}) > 1 "
                              f"OR json_type(__s, {_lit(path + '[0]')}) IN ('ARRAY', 'OBJECT')) "
                              f"THEN {_lit(_array_reason(d.name))}")
        for i, m in enumerate(s.metrics):
            if not m.fields:
                continue
            if m.kind in ("first", "last"):  # (time, value): the record's own time orders values, as in Druid
                pair, pair_check = _pair_sql(i, text(m.fields[0]), m)
                typed.append(f"{pair} AS __m{i}")
                checks += [pair_check] if pair_check else []
                continue
            if m.type == "string":  # a sketch's values, as a list: a cardinality's fields, or their combination
                if m.by_row:
                    combined = ", ".join(f"coalesce({text(f)}, chr(0))" for f in m.fields)
                    typed.append(f"[concat_ws(chr(1), {combined})] AS __m{i}")
                else:  # each element of a JSON array is a value, as in Druid
                    lists = ", ".join(_elements(outputs.get(f) or token(f), text(f)) for f in m.fields)
                    typed.append(f"flatten([{lists}]) AS __m{i}")
                continue
            value = text(m.fields[0])
            typed.append(f"{_cast(value, _SQL_TYPES[m.type])} AS __m{i}")
            skipped = f"__mf{i} AND " if i in metric_filters else ""  # Druid reads a value only to aggregate it
            checks.append(f"WHEN {skipped}{value} IS NOT NULL AND __m{i} IS NULL "
                          f"THEN {_lit('wrong type for ' + m.fields[0] + ' (' + m.type + ')')}")
        for name, (source, column) in metadata.items():
            if source.startswith("key:csv:"):  # a quoted first column may hold commas: not read rather than wrong
                checks.append(f"WHEN left(try(decode({column})), 1) = '\"' THEN "
                              f"{_lit(f'a quoted CSV key ({name}) is not supported')}")
        for name in s.case_clashes:
            column = next(c for c in s.output_columns if c.lower() == name.lower())
            checks.append(f"WHEN json_type(__s, {_lit(_json_path((name,)))}) <> 'NULL' THEN "
                          f"{_lit(f'field {name} differs only in case from column {column}')}")
        if arrays:  # last (its CASE ends the checks): one scan for '[' spares the per-dimension checks
            checks.append(f"WHEN contains(__s, '[') THEN CASE {' '.join(arrays)} END")
        offsets = [_metadata_column("offset")] if s.has_pairs else []
        carried = ", ".join(["__i", *dict.fromkeys([*(column for _, column in metadata.values()), *offsets])])
        columns = [_q(d.name) for d in s.dimensions] + [f"__m{i}" for i, m in enumerate(s.metrics) if m.fields]
        kept = "true" if filter_spec is None else _filter_sql(filter_spec, text)
        matched = [f"coalesce({_filter_sql(f, text)}, false) AS __mf{i}" for i, f in metric_filters.items()]
        seg = bucket_start_sql(s.segment_granularity, "__t")
        return f"""
            WITH {_values_sql(carried, s.delimited, s.avro is not None)},
            obj AS (SELECT {carried}, __is_null, __problem, __s, coalesce(json_valid(__s), false) AS __valid,
                           coalesce(json_valid(__s) AND starts_with(ltrim(__s), '{{'), false) AS __ok FROM src),
            ext AS (SELECT {carried}, __is_null, __problem, __s, __valid, __ok, {", ".join(extract)} FROM obj),
            timed AS (SELECT *, {_timestamp_sql(ts_text, s.timestamp_format)} AS __t FROM ext),
            transformed AS (SELECT *{"".join(", " + c for c in computed)} FROM timed),
            typed AS (SELECT *{"".join(", " + c for c in typed)} FROM transformed),
            kept AS (SELECT *, coalesce({kept}, false) AS __kept{"".join(", " + c for c in matched)} FROM typed)
            SELECT __i, __kept,{"".join(f" __mf{i}," for i in metric_filters)}
                CASE WHEN __is_null THEN 'null value'
                     WHEN __problem IS NOT NULL THEN __problem
                     WHEN __s IS NULL THEN 'not valid UTF-8'
                     WHEN NOT __valid THEN 'invalid JSON'
                     WHEN NOT __ok THEN 'not a JSON object'
                     WHEN {ts_text} IS NULL THEN 'missing timestamp'
                     WHEN __t IS NULL THEN 'invalid timestamp'
                     WHEN __t = TIMESTAMP '1970-01-01' AND NOT ascii(ltrim({ts_text})) BETWEEN 48 AND 57
                         THEN 'invalid timestamp'
                     WHEN NOT (__t >= TIMESTAMP '{MIN_TIME:%Y-%m-%d}' AND __t < TIMESTAMP '{MAX_TIME:%Y-%m-%d}')
                         THEN {_lit(f"timestamp out of range (supported: {MIN_TIME:%Y-%m-%d} to {MAX_TIME:%Y-%m-%d})")}
                     WHEN NOT __kept OR NOT ({self._bounds}) THEN NULL
                     {" ".join(checks)}
                END AS __reason,
                __t, {bucket_start_sql(s.query_granularity, "__t")} AS {TIME},
                {seg} AS {SEGMENT_START}
                {"".join(", " + c for c in columns)}
            FROM kept"""

    @staticmethod
    def _bounds_sql(min_time: datetime | None, max_time: datetime | None) -> str:
        conds = []
        if min_time is not None:
            conds.append(f"__t >= TIMESTAMP '{min_time.astimezone(UTC).replace(tzinfo=None).isoformat()}'")
        if max_time is not None:
            conds.append(f"__t <= TIMESTAMP '{max_time.astimezone(UTC).replace(tzinfo=None).isoformat()}'")
        return " AND ".join(conds) or "true"

    def _aggregate_sql(self, source: str, combine: bool, status: bool = False) -> str:
        """Group ``source`` by (segment, time, dimensions); with ``status``, also by the record's status.

        A record's status is 0 (good), 1 (bad: each keeps its batch index and reason) or 2 (thrown
        away: outside the time bounds), and ``__n`` counts the records of each output row, so one
        pass over a batch yields the rollup, the bad records and the counts.
        """
        s = self.schema
        dims = [_q(d.name) for d in s.dimensions]
        keys = [SEGMENT_START, TIME, *dims]
        if status:
            keys = [*_STATUS_KEYS, *keys]
        aggs = []
        for i, m in enumerate(s.metrics):
            matched = f"__mf{i}" if m.filter_json is not None and not combine else None  # a filtered aggregator's
            col = _q(m.name) if combine else f"__m{i}" if matched is None else f"CASE WHEN {matched} THEN __m{i} END"
            sql_type = _SQL_TYPES[m.type]
            if m.kind == "count":
                one = "1" if matched is None else f"CASE WHEN {matched} THEN 1 ELSE 0 END"
                counted = "count(*)" if matched is None else f"sum({one})"
                expr = f"sum({_q(m.name)})" if combine else (counted if s.rollup else one)
                sql_type = "BIGINT"
            elif m.sketch is not None:  # lists of values (or sketches) for Python to sketch (or merge)
                aggs.append(f"{_sketch_inputs(col, m.sketch.family, s.rollup, combine)} AS {_q(m.name)}")
                continue
            elif m.kind in ("first", "last"):  # the pair of the earliest (latest) time and offset
                pick = "arg_min" if m.kind == "first" else "arg_max"
                pair = f"{pick}({col}, {_pair_order(col)})" if s.rollup or combine else col
                aggs.append(f"{pair} AS {_q(m.name)}")
                continue
            else:  # sum, min, max: NULLs are skipped, and a group with no value at all stays NULL
                expr = f"{m.kind}({col})" if (s.rollup or combine) else col
                if m.kind == "sum" and sql_type == "BIGINT":
                    expr = _wrapped_long(expr)
            aggs.append(f"CAST({expr} AS {sql_type}) AS {_q(m.name)}")
        if status:
            aggs.append("count(*) AS __n" if s.rollup else "1 AS __n")
        select = ", ".join(keys + aggs)
        if combine or s.rollup:
            return f"SELECT {select} FROM {source} GROUP BY ALL"
        return f"SELECT {select} FROM {source}"

    def parse(self, values: list[bytes | None], metadata: Mapping[str, pa.Array] | None = None) -> ParsedBatch:
        """Parse and roll up one batch of record values (``None`` for a null value), in one pass.

        ``metadata`` holds the records' metadata the schema reads (:attr:`RollupSchema.metadata_needs`),
        by need: ``key`` and ``header:<name>`` (binary), ``timestamp`` (int64 ms), ``topic`` (string),
        ``offset`` (int64; the records' positions in ``values`` if not given).
        """
        out = self._classified(values, metadata)
        status = out.column("__status")
        good = pc.equal(status, 0)
        if pc.all(good).as_py() is not False:  # the usual case: every record is good (or none came)
            return ParsedBatch(self._sketched(out.drop_columns(_AUX_COLUMNS), build_sketches), 0, (), 0)
        bad = out.filter(pc.equal(status, 1)).sort_by("__bad_i")  # one row per bad record
        if self._became_multi_value(bad):
            return self.parse(values, metadata)
        rows = self._sketched(out.filter(good).drop_columns(_AUX_COLUMNS), build_sketches)
        thrown = out.filter(pc.equal(status, 2)).column("__n")
        first = bad.slice(0, _SAMPLE_LIMIT)
        samples = tuple(BadRecord(int(i), str(r), _text(values[i])[:300])
                        for i, r in zip(first.column("__bad_i").to_pylist(), first.column("__reason").to_pylist(),
                                        strict=True))
        return ParsedBatch(rows, bad.num_rows, samples, int(pc.sum(thrown).as_py() or 0))

    def parse_each(self, values: list[bytes | None], metadata: Mapping[str, pa.Array] | None = None
                   ) -> list[tuple[dict[str, Any] | None, str | None]]:
        """Each record parsed on its own, in batch order, by a schema without rollup (the sampler's view).

        A kept record gives ``(row, None)``, an unparseable one ``(None, reason)``, one the filter
        throws away ``(None, None)``. The batch is still parsed in one pass.
        """
        if self.schema.rollup:
            raise ValueError("parse_each needs a schema without rollup: with it, records share rows")
        out = self._classified(values, metadata)
        status = out.column("__status").to_pylist()
        if self._became_multi_value(out.filter(pc.equal(out.column("__status"), 1))):
            return self.parse_each(values, metadata)
        bad_at = out.column("__bad_i").to_pylist()
        if len(status) != len(values) or any(s == 1 and i != k for k, (s, i) in enumerate(zip(status, bad_at,
                                                                                                strict=True))):
            raise AssertionError("the parse did not keep the batch's order")  # a row per record, in order
        kept = self._sketched(out.filter(pc.equal(out.column("__status"), 0)).drop_columns(
            [*_AUX_COLUMNS, SEGMENT_START]), build_sketches).to_pylist()
        reasons, rows = out.column("__reason").to_pylist(), iter(kept)
        return [(next(rows), None) if s == 0 else (None, reasons[k] if s == 1 else None)
                for k, s in enumerate(status)]

    def _classified(self, values: list[bytes | None], metadata: Mapping[str, pa.Array] | None) -> pa.Table:
        """The parse query's answer for one batch: its rows, each with the status of its records."""
        problems: dict[str, pa.Array] = {}
        raw_values = values
        if self._avro is not None:  # decoded to JSON text here; the reason for each that cannot be
            raw_values, reasons = self._avro.to_json(values)
            problems["__problem"] = pa.array(reasons, type=pa.string())
        positions = pa.array(np.arange(len(values), dtype=np.int64))
        offsets = {"offset": positions} if self.schema.has_pairs else {}
        batch = pa.table({"__i": positions, "__raw": pa.array(raw_values, type=pa.binary()), **problems,
                          **{_metadata_column(need): array for need, array in {**offsets, **(metadata or {})}.items()}})
        self._con.register("batch", batch)
        try:
            if self.schema.discover:
                self._discover()
            return arrow_query(self._con, self._parse_query)
        finally:
            self._con.unregister("batch")

    def _became_multi_value(self, bad: pa.Table) -> bool:
        """Whether ``bad`` rows hold arrays in string dimensions (Druid's multi-value dimensions).

        If so, the schema stores them as lists from now on, and the batch must be parsed again.
        """
        arrays = {_array_reason(d.name): d.name for d in self.schema.dimensions
                  if d.type == "string" and not d.multi_value}
        found = {arrays[r] for r in pc.unique(bad.column("__reason")).to_pylist() if r in arrays}
        if found:
            self._use(self.schema.with_multi_value(found))
        return bool(found)

    def _with_every_dimension(self, rows: pa.Table) -> pa.Table:
        """``rows`` (with a segment start) in the schema's column order.

        Dimensions discovered since are null, those that became multi-value since are lists, and
        those whose discovered type widened since are of the wider type.
        """
        types = self.schema.arrow_types
        for d in self.schema.dimensions:
            if d.name not in rows.column_names:
                rows = rows.append_column(d.name, pa.nulls(rows.num_rows, types[d.name]))
            elif d.multi_value:
                rows = rows.set_column(rows.column_names.index(d.name), d.name, as_multi_value(rows.column(d.name)))
            elif d.discovered and rows.schema.field(d.name).type != types[d.name]:
                rows = rows.set_column(rows.column_names.index(d.name), d.name, widened(rows.column(d.name),
                                                                                       types[d.name]))
        return rows.select([SEGMENT_START, *self.schema.output_columns])

    def split_by_segment(self, rows: pa.Table) -> list[tuple[datetime, datetime, pa.Table]]:
        """Cut rolled-up rows into (interval start, interval end, rows) per segment interval.

        Rows come out fully sorted (time, dimensions, metrics), so the same input always
        gives byte-identical files; ``__time`` is UTC milliseconds, as Druid keeps it.
        """
        columns = ", ".join(_q(c) for c in self.schema.output_columns)
        end = bucket_end_sql(self.schema.segment_granularity, SEGMENT_START)
        self._con.register("rows", rows)
        try:
            intervals = self._con.execute(
                f"SELECT DISTINCT {SEGMENT_START}, {end} FROM rows ORDER BY 1").fetchall()
            out = []
            for start, stop in intervals:
                part = arrow_query(self._con, f"SELECT {columns} FROM rows WHERE {SEGMENT_START} = $start ORDER BY ALL",
                                   {"start": start})
                part = part.set_column(0, TIME, part.column(0).cast(pa.timestamp("ms", tz="UTC")))
                out.append((start.replace(tzinfo=UTC), stop.replace(tzinfo=UTC), part))
            return out
        finally:
            self._con.unregister("rows")

    def sort(self, rows: pa.Table) -> pa.Table:
        """``rows`` sorted by every column in order, as segment files keep them (lists and sketches too)."""
        self._con.register("rows", rows)
        try:
            return arrow_query(self._con, "SELECT * FROM rows ORDER BY ALL")
        finally:
            self._con.unregister("rows")

    def merge(self, partials: list[pa.Table]) -> pa.Table:
        """Combine partial rollups (count and sums add, min/max combine); no-op without rollup."""
        if not partials:
            raise ValueError("nothing to merge")
        partials = [self._with_every_dimension(p) for p in partials]
        if len(partials) == 1 or not self.schema.rollup:
            return pa.concat_tables(partials)
        self._con.register("partials", pa.concat_tables(partials))
        try:
            return self._sketched(arrow_query(self._con, self._aggregate_sql("partials", combine=True)), merge_sketches)
        finally:
            self._con.unregister("partials")

    def _sketched(self, rows: pa.Table, make: Callable[[Sketch, pa.ChunkedArray], pa.Array]) -> pa.Table:
        """``rows`` with each sketch column's lists (of values, or of sketches) made into sketches."""
        for m in self.schema.metrics:
            if m.sketch is not None:
                rows = rows.set_column(rows.column_names.index(m.name), m.name, make(m.sketch, rows.column(m.name)))
        return rows
