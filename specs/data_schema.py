"""The ``dataSchema`` part of a Druid Kafka supervisor spec.

All models are frozen and read Druid's camelCase JSON names (snake_case Python
names work too). A field a model does not model is accepted only when it cannot
change what is ingested: it is one of Druid's tuning or scheduling fields the
model lists as ``harmless``, or its value is empty (null, ``{}``, ``[]``). Such
fields are reported as ignored (:func:`specs.supervisor.ignored_field_paths`);
any other is refused naming its path, a misspelt field included.  The I/O, tuning and top-level
models live in :mod:`specs.supervisor`; :mod:`specs` re-exports both.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel
from sqlglot import exp

from specs import limits
from specs.durations import UtcTimestamp
from specs.expressions import parse_expression
from specs.filters import check_filter_limits, filter_condition
from specs.granularity import Granularity
from specs.sketch_aggregators import SKETCH_AGGREGATORS, Sketch, sketch_of
from specs.spec_errors import SpecError, json_type_name, key_path

__all__ = [
    "AggregatorType",
    "DataSchemaSpec",
    "DimensionSpec",
    "DimensionType",
    "DimensionsSpec",
    "ExpressionTransform",
    "GranularitySpec",
    "MetricSpec",
    "SpecModel",
    "TimestampSpec",
    "TransformSpec",
]

TIMESTAMP_FORMATS = ("auto", "iso", "millis", "posix", "micro", "nano")
DimensionType = Literal["string", "long", "float", "double"]
AggregatorType = Literal[
    "count", "longSum", "doubleSum", "floatSum", "longMin", "longMax",
    "doubleMin", "doubleMax", "floatMin", "floatMax",
    "thetaSketch", "HLLSketchBuild", "quantilesDoublesSketch", "hyperUnique", "cardinality",
    "longFirst", "longLast", "doubleFirst", "doubleLast", "floatFirst", "floatLast", "stringFirst", "stringLast",
]  # fmt: skip
_AGGREGATOR_TYPES: tuple[str, ...] = get_args(AggregatorType)
_UNSAFE_NAME_CHARACTERS = frozenset('*?[]{}`"')
Name = Annotated[str, limits.at_most(limits.MAX_NAME_LENGTH, "characters")]
"""A column or input field name (at most :data:`specs.limits.MAX_NAME_LENGTH` characters)."""
"""Not in a datasource name: glob characters (its files are listed by pattern) and identifier quotes."""


def unsupported(path: str, what: str, fix: str = "remove it") -> tuple[str, str]:
    """The error for a Druid field that would change what is ingested and is not implemented."""
    return (path, f"{what} is not supported yet; ignoring it would ingest other data than Druid does, "
                  f"so the spec is refused: {fix}")


def duplicates(names: list[str], list_path: str, what: str) -> list[tuple[str, str]]:
    """An error at ``list_path[i].name`` for every name that repeats an earlier one."""
    first: dict[str, int] = {}
    errors: list[tuple[str, str]] = []
    for index, name in enumerate(names):
        if name in first:
            errors.append(
                (
                    f"{list_path}[{index}].name",
                    f"duplicate {what} name {name!r} (first at index {first[name]})",
                )
            )
        else:
            first[name] = index
    return errors


class SpecModel(BaseModel):
    """Base of every spec model: frozen, strict JSON types, camelCase aliases, harmless unknown fields kept."""

    model_config = ConfigDict(
        frozen=True,
        strict=True,
        extra="allow",
        alias_generator=to_camel,
        populate_by_name=True,
        use_attribute_docstrings=True,
    )

    ignored_when_set: ClassVar[tuple[str, ...]] = ()
    """Modelled fields that are accepted for compatibility but have no effect here."""
    harmless: ClassVar[frozenset[str]] = frozenset()
    """Druid fields not modelled here that cannot change what is ingested: accepted, reported as ignored."""
    not_implemented: ClassVar[dict[str, str]] = {}
    """Druid fields that would change what is ingested and are not implemented: name -> what it does.
    Refused unless off (``false`` or empty)."""

    @model_validator(mode="after")
    def _refuse_unknown_fields(self) -> SpecModel:
        errors = []
        for key, value in (self.model_extra or {}).items():
            what = self.not_implemented.get(key)
            if key in self.harmless or value in (None, {}, []) or (what is not None and value is False):
                continue
            errors.append(unsupported(key_path(key), what) if what is not None else (
                key_path(key), "unknown field: not a Druid field this service knows, so it cannot tell whether "
                               "ignoring it would ingest other data; the spec is refused: check the spelling "
                               "or remove it"))
        if errors:
            raise SpecError(errors)
        return self

    @model_serializer(mode="wrap")
    def _omit_absent_optionals(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Leave out optional modelled fields that are None; unmodelled fields are kept as given."""
        data: dict[str, Any] = handler(self)
        for name, info in type(self).model_fields.items():
            if info.default is None and getattr(self, name) is None:
                data.pop(info.alias or name, None)
                data.pop(name, None)
        return data


class TimestampSpec(SpecModel):
    """Where the primary timestamp of each row comes from."""

    column: Name = Field(default="timestamp", min_length=1)
    """Input column holding the timestamp."""
    format: str = "auto"
    """Timestamp format: iso, posix (seconds), millis, micro, nano or auto (iso or millis); lowercase."""
    missing_value: UtcTimestamp | None = None
    """Timestamp to use for rows whose timestamp column is null or missing."""

    @field_validator("format", mode="before")
    @classmethod
    def _normalise_format(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        lowered = value.strip().lower()
        if lowered not in TIMESTAMP_FORMATS:
            allowed = ", ".join(TIMESTAMP_FORMATS)
            raise SpecError.at("", f"unsupported timestamp format {value!r}; expected one of {allowed}")
        return lowered


def _supported_filter(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """Refuse a Druid filter we cannot apply exactly (:class:`SpecError` naming the unsupported part)."""
    if value is not None:
        check_filter_limits(value)
        filter_condition(value, exp.column)
    return value


def _not_reserved(name: str) -> str:
    """Refuse column names the segment schema keeps for itself (``__time`` and any ``__`` prefix)."""
    if name.startswith("__"):
        raise SpecError.at("", f"{name!r} is reserved: names starting with '__' (such as __time) are "
                               "the segment schema's own columns")
    return name


class DimensionSpec(SpecModel):
    """One dimension; a bare string in the JSON means a string dimension of that name."""

    harmless: ClassVar[frozenset[str]] = frozenset({"createBitmapIndex"})

    name: Name = Field(min_length=1)
    """Name of the dimension, read from the input field of the same name."""
    type: DimensionType = "string"
    """Column type: string, long, float or double."""
    multi_value_handling: Literal["SORTED_ARRAY", "SORTED_SET", "ARRAY"] | None = None
    """A JSON array for a string dimension: its values sorted (SORTED_ARRAY, the default), sorted without
    repeats (SORTED_SET) or as they came (ARRAY)."""

    @field_validator("multi_value_handling", mode="before")
    @classmethod
    def _upper_case(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    _reserved = field_validator("name")(_not_reserved)

    @model_validator(mode="before")
    @classmethod
    def _from_plain_name(cls, data: object) -> object:
        if isinstance(data, str):
            return {"name": data}
        if not isinstance(data, dict | SpecModel):
            raise SpecError.at(
                "", f"expected a dimension name or an object with a name, got {json_type_name(data)}"
            )
        return data


class DimensionsSpec(SpecModel):
    """The dimension columns to ingest."""

    harmless: ClassVar[frozenset[str]] = frozenset({"forceSegmentSortByTime"})
    not_implemented: ClassVar[dict[str, str]] = {"spatialDimensions": "spatial dimensions"}

    dimensions: Annotated[tuple[DimensionSpec, ...], limits.at_most(limits.MAX_DIMENSIONS, "dimensions")] = Field(
        default=(), strict=False)
    """Dimension names or objects; an empty list discovers string dimensions from the records."""
    dimension_exclusions: Annotated[tuple[Name, ...], limits.at_most(limits.MAX_DIMENSION_EXCLUSIONS, "names")] = (
        Field(default=(), strict=False))
    """Input fields to leave out when dimensions are discovered."""
    include_all_dimensions: bool = False
    """Discover string dimensions besides the listed ones."""
    use_schema_discovery: bool = False
    """Discover every other field as a dimension typed by its values: LONG (booleans as 1/0), DOUBLE or
    STRING, the least restrictive of the values seen (a segment's type; queries widen across segments)."""

    @property
    def names(self) -> list[str]:
        """The dimension names in order."""
        return [dimension.name for dimension in self.dimensions]

    @property
    def discovers(self) -> bool:
        """Whether every input field that is not the timestamp, a metric or excluded becomes a dimension."""
        return not self.dimensions or self.include_all_dimensions or self.use_schema_discovery

    @model_validator(mode="after")
    def _unique_names(self) -> DimensionsSpec:
        errors = duplicates(self.names, "dimensions", "dimension")
        if errors:
            raise SpecError(errors)
        return self


class MetricSpec(SpecModel):
    """One aggregator of ``metricsSpec``, computed at ingestion time; ``filtered`` wraps another.

    Sketch aggregators (:mod:`specs.sketch_aggregators`) store a sketch of the field's values per row.
    """

    harmless: ClassVar[frozenset[str]] = frozenset({"shouldFinalize", "round", "maxStreamLength"})
    """How a query finalizes the sketch, not what is stored."""
    not_implemented: ClassVar[dict[str, str]] = {
        "expression": "an aggregator's expression",
        "isInputThetaSketch": "input values that are theta sketches already",
        "isInputHyperUnique": "input values that are hyperUnique sketches already"}

    type: AggregatorType | Literal["filtered"]
    """Aggregator type: count, long/double/float Sum, Min or Max, or filtered."""
    name: Name = Field(min_length=1)
    """Output column name of the aggregator (a filtered one's defaults to its aggregator's)."""
    field_name: Annotated[Name, Field(min_length=1)] | None = None
    """Input field to aggregate (not used by count)."""
    filter: dict[str, Any] | None = None
    """filtered only: the Druid filter a record must match to be aggregated (see :mod:`specs.filters`)."""
    aggregator: MetricSpec | None = None
    """filtered only: the aggregator applied to the matching records."""
    size: int | None = None
    """thetaSketch only: nominal entries, a power of 2 (default 16384)."""
    lg_k: int | None = None
    """HLLSketchBuild only: log2 of the number of buckets, 4 to 21 (default 12)."""
    tgt_hll_type: Literal["HLL_4", "HLL_6", "HLL_8"] | None = None
    """HLLSketchBuild only: bits per bucket (default HLL_4)."""
    k: int | None = None
    """quantilesDoublesSketch only: accuracy, a power of 2 from 2 to 32768 (default 128)."""
    fields: Annotated[tuple[Name, ...], Field(strict=False, min_length=1),
                      limits.at_most(limits.MAX_CARDINALITY_FIELDS, "fields")] | None = None
    """cardinality only: the input fields counted (instead of fieldName)."""
    time_column: Literal["__time"] | None = None
    """first/last only: the time that orders values; only the record's own timestamp, ``__time``."""
    max_string_bytes: Annotated[int, limits.at_most(limits.MAX_STRING_BYTES, "")] | None = Field(default=None, ge=0)
    """stringFirst/stringLast only: values are cut to this many characters, as Druid's ingestion cuts them
    (despite the name; default 1024)."""
    by_row: bool | None = None
    """cardinality only: count distinct combinations of the fields' values, not distinct values (default false)."""

    _reserved = field_validator("name")(_not_reserved)

    @model_validator(mode="before")
    @classmethod
    def _filtered_name(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("type") == "filtered" and data.get("name") is None:
            inner = data.get("aggregator")
            if isinstance(inner, dict) and isinstance(inner.get("name"), str):
                return {**data, "name": inner["name"]}
        return data

    @field_validator("type", mode="before")
    @classmethod
    def _known_type(cls, value: object) -> object:
        if isinstance(value, str) and value not in (*_AGGREGATOR_TYPES, "filtered"):
            supported = ", ".join((*_AGGREGATOR_TYPES, "filtered"))
            raise SpecError.at("", f"unknown aggregator type {value!r}; supported: {supported}")
        return value

    _supported_filter = field_validator("filter")(_supported_filter)

    @model_validator(mode="after")
    def _field_name_rules(self) -> MetricSpec:
        if self.type == "filtered":
            errors = [(key, "required for a filtered aggregator") for key, value in
                      (("filter", self.filter), ("aggregator", self.aggregator)) if value is None]
            if self.field_name is not None:
                errors.append(("fieldName", "a filtered aggregator takes no fieldName (its aggregator does)"))
            if self.aggregator is not None and self.aggregator.type == "filtered":
                errors.append(("aggregator.type", "a filtered aggregator cannot wrap another filtered one"))
            if errors:
                raise SpecError(errors)
            return self
        for key, value in (("filter", self.filter), ("aggregator", self.aggregator)):
            if value is not None:
                raise SpecError.at(key, f"only a filtered aggregator takes {key}")
        if self.type in ("count", "cardinality") and self.field_name is not None:
            raise SpecError.at("fieldName", f"a {self.type} aggregator takes no fieldName"
                               + (" (it takes fields)" if self.type == "cardinality" else ""))
        if self.type not in ("count", "cardinality") and self.field_name is None:
            raise SpecError.at("fieldName", f"required for a {self.type} aggregator")
        if (self.type == "cardinality") != (self.fields is not None):
            raise SpecError.at("fields", "required for a cardinality aggregator" if self.type == "cardinality"
                               else "only a cardinality aggregator takes fields")
        sketch_of(self.type, self.model_dump(by_alias=True))  # refuses parameters out of range or misplaced
        if self.time_column is not None and not self.type.endswith(("First", "Last")):
            raise SpecError.at("timeColumn", "only a first or last aggregator takes timeColumn")
        if self.max_string_bytes is not None and self.type not in ("stringFirst", "stringLast"):
            raise SpecError.at("maxStringBytes", "only a stringFirst or stringLast aggregator takes maxStringBytes")
        return self

    @property
    def base(self) -> MetricSpec:
        """The aggregator that computes the value: this one, or the one a filtered aggregator wraps."""
        return self.aggregator if self.aggregator is not None else self

    @property
    def input_fields(self) -> tuple[str, ...]:
        """The input fields aggregated (none for count)."""
        base = self.base
        return base.fields or (() if base.field_name is None else (base.field_name,))

    @property
    def sketch(self) -> Sketch | None:
        """The sketch this aggregator stores (None: it stores a number)."""
        return sketch_of(self.base.type, self.base.model_dump(by_alias=True))

    @property
    def kind(self) -> Literal["count", "sum", "min", "max", "sketch", "first", "last"]:
        """What the aggregator computes."""
        kind = self.base.type
        if kind == "count":
            return "count"
        if kind in SKETCH_AGGREGATORS:
            return "sketch"
        if kind.endswith(("First", "Last")):
            return "first" if kind.endswith("First") else "last"
        if kind.endswith("Sum"):
            return "sum"
        return "min" if kind.endswith("Min") else "max"


class GranularitySpec(SpecModel):
    """Segment and query granularity and rollup."""

    ignored_when_set: ClassVar[tuple[str, ...]] = ("intervals",)

    type: Literal["uniform"] = "uniform"
    """Granularity spec type; only uniform is supported."""
    segment_granularity: Granularity = Granularity("period", millis=3_600_000)
    """Time span of each segment (default HOUR); may not be NONE."""
    query_granularity: Granularity = Granularity("none")
    """Timestamps are truncated to this granularity before rollup (default NONE)."""
    rollup: bool = True
    """Whether rows with equal truncated timestamp and dimensions are combined."""
    intervals: tuple[Any, ...] | None = Field(default=None, strict=False)
    """Accepted and ignored: a streaming supervisor takes no intervals."""

    @model_validator(mode="after")
    def _segment_not_none(self) -> GranularitySpec:
        if self.segment_granularity.kind == "none":
            raise SpecError.at("segmentGranularity", "segmentGranularity may not be NONE")
        start = self.segment_granularity.truncate(datetime(2000, 1, 1, tzinfo=UTC))
        if self.segment_granularity.bucket_end(start) - start < limits.MIN_SEGMENT_GRANULARITY:
            raise SpecError.at("segmentGranularity", "must be at least SECOND (a limit of this service), "
                                                     f"got {self.segment_granularity}")
        if not self.query_granularity.nests_in(self.segment_granularity):
            raise SpecError.at("queryGranularity", f"{self.query_granularity} buckets do not fit in "
                               f"{self.segment_granularity} segments: a row's __time would fall outside its "
                               "segment's interval; use a queryGranularity that divides the segmentGranularity")
        return self


class ExpressionTransform(SpecModel):
    """An input field computed from the record by a Druid expression (see :mod:`specs.expressions`)."""

    type: Literal["expression"]
    """Transform type; only expression transforms exist."""
    name: Name = Field(min_length=1)
    """The field it makes (or replaces) for dimensions, metrics and the filter."""
    expression: Annotated[str, limits.at_most(limits.MAX_EXPRESSION_LENGTH, "characters")]
    """The expression, over the record's input fields as they are (not other transforms' outputs)."""

    _reserved = field_validator("name")(_not_reserved)

    @field_validator("expression")
    @classmethod
    def _supported_expression(cls, value: str) -> str:
        parse_expression(value)
        return value


class TransformSpec(SpecModel):
    """Druid's ``transformSpec``: computed input fields, and a filter on the records (the rest are thrown away)."""

    filter: dict[str, Any] | None = None
    """A Druid filter (see :mod:`specs.filters`) over input fields, transforms' outputs and ``__time``."""
    transforms: Annotated[tuple[ExpressionTransform, ...], limits.at_most(limits.MAX_TRANSFORMS, "transforms")] = (
        Field(default=(), strict=False))
    """Expression transforms; each reads the record as it arrived."""

    _supported_filter = field_validator("filter")(_supported_filter)

    @model_validator(mode="after")
    def _unique_names(self) -> TransformSpec:
        errors = duplicates([t.name for t in self.transforms], "transforms", "transform")
        if errors:
            raise SpecError(errors)
        return self


class DataSchemaSpec(SpecModel):
    """The datasource name and the schema of its rows."""

    not_implemented: ClassVar[dict[str, str]] = {
        "parser": "the legacy parser (Druid's inputFormat and timestampSpec replace it)"}

    data_source: str
    """Name of the datasource (and supervisor id); it must be safe as a path component."""
    timestamp_spec: TimestampSpec = TimestampSpec()
    """Primary timestamp column and format."""
    dimensions_spec: DimensionsSpec = DimensionsSpec()
    """Dimension columns."""
    metrics_spec: Annotated[tuple[MetricSpec, ...], limits.at_most(limits.MAX_METRICS, "metrics")] = Field(
        default=(), strict=False)
    """Aggregators applied at ingestion time."""
    granularity_spec: GranularitySpec = GranularitySpec()
    """Segment and query granularity, and rollup."""
    transform_spec: TransformSpec = TransformSpec()
    """Which records are ingested (a filter) and computed input fields."""

    @field_validator("data_source")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        if not value:
            raise SpecError.at("", "must not be empty")
        if value.startswith("."):
            raise SpecError.at("", f"must not start with '.', got {value!r}")
        for bad in ("/", "\\", ".."):
            if bad in value:
                raise SpecError.at("", f"must be usable as a path component (no {bad!r}), got {value!r}")
        if len(value.encode()) > limits.MAX_DATASOURCE_BYTES:
            raise SpecError.at("", f"must be at most {limits.MAX_DATASOURCE_BYTES} bytes, got {len(value.encode())}")
        unsafe = sorted({c for c in value if c in _UNSAFE_NAME_CHARACTERS or not c.isprintable()})
        if unsafe:
            raise SpecError.at("", f"characters {', '.join(map(repr, unsafe))} are not allowed (glob patterns, "
                                   f"identifier quotes and control characters), got {value!r}")
        return value

    @model_validator(mode="after")
    def _column_names(self) -> DataSchemaSpec:
        metric_names = [metric.name for metric in self.metrics_spec]
        errors = duplicates(metric_names, "metricsSpec", "metric")
        for index, name in enumerate(self.dimensions_spec.names):
            path = f"dimensionsSpec.dimensions[{index}].name"
            if name == self.timestamp_spec.column:
                errors.append((path, f"dimension {name!r} has the name of the timestamp column"))
            elif name in metric_names:
                errors.append((path, f"dimension {name!r} has the name of a metric"))
        columns = [(f"dimensionsSpec.dimensions[{i}].name", n) for i, n in enumerate(self.dimensions_spec.names)]
        columns += [(f"metricsSpec[{i}].name", n) for i, n in enumerate(metric_names)]
        first: dict[str, str] = {}
        for path, name in columns:  # segment columns differing only in case are one column to Spark and DuckDB
            other = first.setdefault(name.lower(), name)
            if other != name:
                errors.append((path, f"{name!r} differs from column {other!r} only in case; names are "
                                     "case-insensitive in queries"))
        if errors:
            raise SpecError(errors)
        return self
