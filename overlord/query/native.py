"""Druid's native queries at ``POST /druid/v2``, in Druid's response shapes.

Supported: ``timeseries``, ``topN``, ``groupBy`` (with ``having``: :mod:`overlord.query.native_having`),
``scan``, ``timeBoundary``, ``segmentMetadata`` (merged), ``dataSourceMetadata`` and ``search``
(:mod:`overlord.query.native_search`); extraction functions in dimension specs and filters
(:mod:`overlord.query.native_extraction`); expression virtual columns and aggregators' ``expression``
inputs (:mod:`overlord.query.native_expressions`).
Each query becomes one Druid SQL statement, built as a sqlglot syntax tree (names and values
from the JSON are quoted by the generator, never pasted into text) and run by the SQL engine,
so it reads exactly the visible segments, passes the sandbox and obeys the query limits.
Post-aggregators and Druid's filled-in empty ``timeseries`` buckets are computed on the
result (``expression`` ones: :mod:`overlord.query.native_post_expressions`). Anything else (other
query types, lookups, sketch post-aggregators) is a 400 naming the field.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast

import sqlalchemy as sa
from pyspark.sql import SparkSession
from sqlglot import exp

from overlord.query.druid_sql import MILLIS, parse_period
from overlord.query.engine import QueryLimits, execute_sql
from overlord.query.formats import QueryResult
from overlord.query.local_engine import LocalEngine
from overlord.query.native_checks import GRANULARITIES, bad, field
from overlord.query.native_expressions import VirtualColumns
from overlord.query.native_extraction import extract
from overlord.query.native_having import parse_having
from overlord.query.native_post_expressions import expression_post_aggregator
from overlord.query.native_search import run_search
from segment_store.timeline import visible_segments, visible_set
from specs.filters import filter_condition, parse_intervals, time_condition
from specs.spec_errors import SpecError, join_path

__all__ = ["run_native"]

_AGGREGATES = {"Sum": "SUM", "Min": "MIN", "Max": "MAX"}
_OUTPUT_TYPES = {"STRING": "VARCHAR", "LONG": "BIGINT", "FLOAT": "FLOAT", "DOUBLE": "DOUBLE"}
"""A dimension spec's ``outputType`` and the SQL type its values are converted to."""
_TIME = "__time"
_T = TypeVar("_T")


def _col(name: str) -> exp.Column:
    return exp.column(name, quoted=True)


def _value(value: Any) -> exp.Expr:
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    return exp.Literal.number(value) if isinstance(value, int | float) else exp.Literal.string(str(value))


# --- filters -------------------------------------------------------------------------------------


def _filter(spec: Any, path: str) -> exp.Expr:
    """A Druid filter as a SQL condition."""
    return _checked(lambda: filter_condition(spec, _col, _extract), path)


def _extract(spec: object, value: exp.Expression, is_time: bool) -> exp.Expression:
    """An ``extractionFn`` of a filter, as text."""
    return cast(exp.Expression, extract(spec, value, is_time))


def _parse_intervals(texts: Any, path: str) -> list[tuple[datetime, datetime]]:
    """A list of ISO-8601 intervals, or Druid's ``{"type": "intervals", "intervals": [...]}`` (Grafana's)."""
    if isinstance(texts, Mapping):
        if texts.get("type") != "intervals":
            raise bad(f"{path}.type", "only {\"type\": \"intervals\", \"intervals\": [...]} or a list of "
                                       "intervals is supported")
        return _parse_intervals(texts.get("intervals"), f"{path}.intervals")
    return _checked(lambda: parse_intervals(texts, ""), path)


def _checked(build: Callable[[], _T], path: str) -> _T:
    """``build()``, its :class:`SpecError` as this query's 400 naming the path under ``path``."""
    try:
        return build()
    except SpecError as exc:
        where, message = exc.errors[0]
        raise bad(join_path(path, where), message) from None


def _sql_time(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%d %H:%M:%S.%f")


# --- aggregators ---------------------------------------------------------------------------------


def _aggregator(spec: Any, path: str, virtual: VirtualColumns) -> tuple[str, exp.Expr, Any]:
    """(output name, SQL aggregate, value of an empty bucket); an ``expression`` input is added to ``virtual``."""
    if not isinstance(spec, Mapping):
        raise bad(path, f"expected an aggregator object, got {spec!r}")
    kind = str(spec.get("type"))
    if kind == "filtered":
        name, inner, empty = _aggregator(spec.get("aggregator"), f"{path}.aggregator", virtual)
        condition = _filter(spec.get("filter"), f"{path}.filter")
        return str(spec.get("name") or name), _filtered(inner, condition), empty
    name = field(spec, "name", path)
    if kind == "count":
        return name, exp.Count(this=exp.Star()), 0
    for prefix in ("long", "double", "float"):
        if kind.startswith(prefix) and kind[len(prefix):] in _AGGREGATES:
            function = _AGGREGATES[kind[len(prefix):]]
            column = _col(_input(spec, path, virtual))
            return name, exp.func(function, column), None  # over no rows: null, as in SQL-compatible Druid
    if kind in _DISTINCT or kind in _FIRST_LAST:
        return name, _druid_call(kind, spec, path), None if kind in _FIRST_LAST else 0
    raise bad(f"{path}.type", f"aggregator type {kind!r} is not supported (count, long/double/floatSum, "
                               "...Min, ...Max, ...First, ...Last, thetaSketch, HLLSketchBuild, HLLSketchMerge, "
                               "hyperUnique, cardinality of one field, and filtered are)")


def _input(spec: Mapping[str, Any], path: str, virtual: VirtualColumns) -> str:
    """The column a sum/min/max reads: its ``fieldName``, or its ``expression`` as a virtual column."""
    if spec.get("expression") is None:
        return str(field(spec, "fieldName", path))
    if spec.get("fieldName") is not None:
        raise bad(f"{path}.expression", "an aggregator takes a fieldName or an expression, not both")
    column = f"__expression of {spec.get('name')}"
    virtual.add(column, spec["expression"], f"{path}.expression")
    return column


def _filtered(aggregate: exp.Expr, condition: exp.Expr) -> exp.Expr:
    """``aggregate`` over the rows that match ``condition`` (a filter of a filter matches both conditions)."""
    if isinstance(aggregate, exp.Filter):
        condition = exp.and_(aggregate.expression.this, condition)
        aggregate = aggregate.this
    return exp.Filter(this=aggregate, expression=exp.Where(this=condition))


_DISTINCT = {"thetaSketch": ("APPROX_COUNT_DISTINCT_DS_THETA", ("size",)),
             "HLLSketchBuild": ("APPROX_COUNT_DISTINCT_DS_HLL", ("lgK", "tgtHllType")),
             "HLLSketchMerge": ("APPROX_COUNT_DISTINCT_DS_HLL", ("lgK", "tgtHllType")),
             "hyperUnique": ("APPROX_COUNT_DISTINCT", ()), "cardinality": ("APPROX_COUNT_DISTINCT", ())}
_FIRST_LAST = {f"{kind}{end}" for kind in ("long", "double", "float", "string") for end in ("First", "Last")}


def _druid_call(kind: str, spec: Mapping[str, Any], path: str) -> exp.Expr:
    """The Druid SQL function a distinct-count or first/last aggregator is, such as ``EARLIEST(x)``.

    Over stored sketches or first/last pairs, the function reads those (:mod:`overlord.query.druid_functions`).
    """
    if kind == "cardinality":
        fields = spec.get("fields")
        if not (isinstance(fields, list) and len(fields) == 1 and isinstance(fields[0], str)):
            raise bad(f"{path}.fields", "only a cardinality of one field (a name) is supported")
        return exp.ApproxDistinct(this=_col(fields[0]))
    column = _col(field(spec, "fieldName", path))
    if kind in _FIRST_LAST:
        function = "EARLIEST" if kind.endswith("First") else "LATEST"
        time = spec.get("timeColumn") or "__time"
        if time == "__time":
            return exp.Anonymous(this=function, expressions=[column])
        if not isinstance(time, str):
            raise bad(f"{path}.timeColumn", f"expected a column name, got {time!r}")
        millis = exp.Anonymous(this="MILLIS_TO_TIMESTAMP", expressions=[_col(time)])  # a long column of millis
        return exp.Anonymous(this=f"{function}_BY", expressions=[column, millis])
    function, parameters = _DISTINCT[kind]
    arguments = [column, *(_value(spec[p]) for p in parameters if spec.get(p) is not None)]
    if parameters and len(arguments) > 1 and spec.get(parameters[0]) is None:
        raise bad(f"{path}.{parameters[0]}", f"required with {parameters[1]}")
    return exp.ApproxDistinct(this=column) if function == "APPROX_COUNT_DISTINCT" else exp.Anonymous(
        this=function, expressions=arguments)


_PostAggregator = Callable[[Mapping[str, Any]], Any]
"""A post-aggregator, checked: its value computed from a result row."""


def _divide(left: float, right: float) -> float:
    return left / right if right else 0  # Druid's division: 0 when dividing by zero


def _quotient(left: float, right: float) -> float | None:
    return left / right if right else None  # plain division; JSON has no Infinity


_ARITHMETIC: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": _divide, "quotient": _quotient, "pow": operator.pow}
"""Druid's arithmetic post-aggregator functions; any other ``fn`` is refused."""


def _post_aggregators(specs: Any, names: set[str]) -> list[tuple[str, _PostAggregator]]:
    """``postAggregations`` checked before the query runs, as (output name, value of a row).

    ``names`` are the aggregators' and dimensions' output names; each post-aggregator may read those and
    the post-aggregators before it (Druid refuses a query naming any other field).
    """
    if not isinstance(specs, list):
        raise bad("$.postAggregations", f"expected a list of post-aggregators, got {specs!r}")
    known, checked = set(names), []
    for i, spec in enumerate(specs):
        path = f"$.postAggregations[{i}]"
        compute = _post_aggregator(spec, known, path)
        name = field(spec, "name", path)
        known.add(name)
        checked.append((name, compute))
    return checked


def _post_aggregator(spec: Any, names: set[str], path: str) -> _PostAggregator:
    """One post-aggregator (nested ones included), every field checked; unknown types and functions refused."""
    if not isinstance(spec, Mapping):
        raise bad(path, f"expected a post-aggregator object, got {spec!r}")
    kind = spec.get("type")
    if kind in ("fieldAccess", "finalizingFieldAccess"):
        name = field(spec, "fieldName", path)
        if name not in names:
            raise bad(f"{path}.fieldName", f"{name!r} is not an aggregator, dimension or earlier post-aggregator "
                                            f"of this query ({', '.join(sorted(names)) or 'none'})")
        return lambda row: row.get(name)
    if kind == "constant":
        value = field(spec, "value", path, (int, float))
        if isinstance(value, bool):
            raise bad(f"{path}.value", f"expected a number, got {value!r}")
        return lambda _row: value
    if kind == "arithmetic":
        fn = field(spec, "fn", path)
        if fn not in _ARITHMETIC:
            raise bad(f"{path}.fn", f"{fn!r} is not an arithmetic function (+ - * / quotient pow are)")
        if spec.get("ordering") not in (None, "numericFirst"):
            raise bad(f"{path}.ordering", f"{spec['ordering']!r} is not an ordering (null or numericFirst)")
        fields = field(spec, "fields", path, list)
        if len(fields) < 2:
            raise bad(f"{path}.fields", f"an arithmetic post-aggregator takes 2 or more fields, got {len(fields)}")
        operands = [_post_aggregator(f, names, f"{path}.fields[{i}]") for i, f in enumerate(fields)]
        return lambda row: _arithmetic(_ARITHMETIC[fn], [operand(row) for operand in operands])
    if kind == "expression":
        return expression_post_aggregator(spec, names, path)
    raise bad(f"{path}.type", f"post-aggregator type {kind!r} is not supported (arithmetic, fieldAccess, "
                               "finalizingFieldAccess, constant, expression are)")


def _arithmetic(function: Callable[[Any, Any], Any], values: list[Any]) -> Any:
    """``function`` folded over ``values`` from the left; null if any value is (or a step gives) null."""
    result = values[0]
    for value in values[1:]:
        if result is None or value is None:
            return None
        result = function(result, value)
    return result


# --- queries -------------------------------------------------------------------------------------


_COMMON = {"queryType", "dataSource", "intervals", "filter", "context"}
_AGGREGATING = _COMMON | {"granularity", "aggregations", "postAggregations"}
_KEYS = {
    "timeseries": _AGGREGATING | {"descending", "virtualColumns"},
    "topN": _AGGREGATING | {"dimension", "metric", "threshold", "virtualColumns"},
    "groupBy": _AGGREGATING | {"dimensions", "limitSpec", "having", "virtualColumns"},
    "scan": _COMMON | {"columns", "order", "limit", "resultFormat", "batchSize", "virtualColumns"},
    "timeBoundary": _COMMON | {"bound"}, "dataSourceMetadata": _COMMON,
    "search": _COMMON | {"granularity", "searchDimensions", "query", "sort", "limit"},
    "segmentMetadata": _COMMON | {"merge", "analysisTypes", "lenientAggregatorMerge"},
}
"""The fields each query type takes here; any other (``toInclude``, ...) is refused."""


class _Native:
    """One native query, checked and translated."""

    def __init__(self, query: Mapping[str, Any]) -> None:
        self.query = query
        self.kind = field(query, "queryType", "$")
        unknown = sorted(set(query) - _KEYS.get(self.kind, set(query)))
        if unknown:
            raise bad(f"$.{unknown[0]}", f"not supported in a {self.kind} query here; ignoring it would answer "
                                          "another question than Druid does")
        source = field(query, "dataSource", "$", (str, dict))
        if isinstance(source, dict):
            if source.get("type") != "table":
                raise bad("$.dataSource.type", "only table datasources are supported")
            source = field(source, "name", "$.dataSource")
        self.datasource: str = source
        optional = self.kind in ("timeBoundary", "dataSourceMetadata", "segmentMetadata")
        self.intervals = ([] if optional and query.get("intervals") is None
                          else _parse_intervals(query.get("intervals"), "$.intervals"))
        self.virtual = VirtualColumns()
        if query.get("virtualColumns") is not None:
            self.virtual.read(query["virtualColumns"], "$.virtualColumns")
        self.aggregators = [_aggregator(a, f"$.aggregations[{i}]", self.virtual)
                            for i, a in enumerate(query.get("aggregations", []))]
        self.granularity = self._granularity(query.get("granularity", "all"))
        self.extracted: dict[str, str] = {}
        if self.kind == "topN":
            self.dimensions = _dimensions(field(query, "dimension", "$", (str, dict)), "$.dimension", self.extracted)
        else:
            self.dimensions = _dimensions(query.get("dimensions", []), "$.dimensions", self.extracted)
        self.post_aggregators = _post_aggregators(
            [] if query.get("postAggregations") is None else query["postAggregations"],
            {name for name, _, _ in self.aggregators} | {output for _, output in self.dimensions})
        self.having = None if query.get("having") is None else parse_having(
            query["having"], {name for name, _, _ in self.aggregators} | {output for _, output in self.dimensions},
            {name for name, _ in self.post_aggregators})

    def _granularity(self, value: Any) -> str | None:
        """The bucket period (ISO), ``"none"``, or None for ``all``."""
        if isinstance(value, Mapping):
            if value.get("type") != "period" or value.get("origin") is not None:
                raise bad("$.granularity", "only {\"type\": \"period\", \"period\": ...} granularities (no origin) "
                                            "and the named ones are supported")
            zone = str(value.get("timeZone") or "UTC").upper()
            if zone not in ("UTC", "ETC/UTC"):
                raise bad("$.granularity.timeZone", f"{value.get('timeZone')!r} is not supported; times are UTC")
            return str(field(value, "period", "$.granularity"))
        name = str(value).lower()
        if name in ("all", "none"):
            return None if name == "all" else "none"
        if name not in GRANULARITIES:
            raise bad("$.granularity", f"{value!r} is not a granularity")
        return GRANULARITIES[name]

    def bucket(self) -> exp.Expr:
        if self.granularity is None:
            return exp.cast(exp.Literal.string(_sql_time(self.intervals[0][0]) if self.intervals else
                                               "1970-01-01 00:00:00"), "TIMESTAMP")
        if self.granularity == "none":
            return _col(_TIME)
        return exp.Anonymous(this="TIME_FLOOR", expressions=[_col(_TIME), exp.Literal.string(self.granularity)])

    def where(self) -> exp.Expr | None:
        parts: list[exp.Expr] = [time_condition(self.intervals, _col(_TIME))] if self.intervals else []
        if self.query.get("filter") is not None:
            parts.append(_filter(self.query["filter"], "$.filter"))
        return exp.and_(*parts) if parts else None

    def select(self, dimensions: list[tuple[exp.Expr, str]]) -> exp.Select:
        columns = [exp.alias_(self.bucket(), "__bucket", quoted=True)]
        columns += [exp.alias_(dim.copy(), out, quoted=True) for dim, out in dimensions]
        columns += [exp.alias_(agg, name, quoted=True) for name, agg, _ in self.aggregators]
        select = exp.select(*columns).from_(exp.Table(this=exp.to_identifier(self.datasource, quoted=True)))
        where = self.where()
        if where is not None:
            select = select.where(where)
        groups = [self.bucket(), *(dim.copy() for dim, _ in dimensions)]
        return select.group_by(*groups) if self.aggregators or dimensions else select


def _dimensions(specs: Any, path: str, extracted: dict[str, str]) -> list[tuple[exp.Expr, str]]:
    """(SQL value, output name) per dimension spec: a column, or a column through an extraction function.

    ``extracted`` gets the path of each column read through an extraction function.
    """
    out: list[tuple[exp.Expr, str]] = []
    for i, spec in enumerate(specs if isinstance(specs, list) else [specs]):
        where = f"{path}[{i}]" if isinstance(specs, list) else path
        if isinstance(spec, str):
            out.append((_col(spec), spec))
            continue
        kind = spec.get("type", "default") if isinstance(spec, Mapping) else None
        if kind not in ("default", "extraction"):
            raise bad(where, "only plain, default and extraction dimension specs are supported")
        column = field(spec, "dimension", where)
        value: exp.Expr = _col(column)
        if kind == "extraction":
            value = _checked(functools.partial(extract, spec.get("extractionFn"), value, column == _TIME),
                             f"{where}.extractionFn")
            output_type = str(spec.get("outputType") or "STRING").upper()
            if output_type not in _OUTPUT_TYPES:
                raise bad(f"{where}.outputType", f"{spec['outputType']!r} is not one of {', '.join(_OUTPUT_TYPES)}")
            if output_type != "STRING":  # the extracted text as a number (null where it is not one)
                value = exp.cast(value, _OUTPUT_TYPES[output_type])
            extracted.setdefault(column, where)
        out.append((value, str(spec.get("outputName") or column)))
    return out


def run_native(spark: SparkSession, engine: sa.Engine, query: Any, limits: QueryLimits | None = None,
               query_id: str | None = None, local: LocalEngine | None = None) -> list[dict[str, Any]]:
    """Run a native query; Druid's response body (``local``: as for :func:`execute_sql`)."""
    limits = limits or QueryLimits()
    if not isinstance(query, Mapping):
        raise bad("$", "expected a native query object")
    native = _Native(query)
    multi_value = set()
    if native.extracted or native.virtual:
        multi_value = {name for name, kind in visible_set(engine, [native.datasource]).complex_columns(
            [native.datasource]).items() if kind == "multi_value"}
        for column, where in native.extracted.items():
            if column in multi_value:
                raise bad(f"{where}.extractionFn", f"an extraction function over the multi-value dimension "
                                                   f"{column!r} is not supported")

    def run_sql(select: exp.Expr) -> QueryResult:
        return execute_sql(spark, engine, select.sql(dialect="druid"), limits=limits, query_id=query_id, local=local)

    read_virtual: list[Callable[[exp.Expr], exp.Expr]] = []

    def run(select: exp.Expr) -> QueryResult:
        if native.virtual and not read_virtual:  # the columns' types decide what an expression means
            table = exp.Table(this=exp.to_identifier(native.datasource, quoted=True))
            schema = run_sql(exp.select(exp.Star()).from_(table).limit(0)).table.schema
            read_virtual.append(native.virtual.bind(schema, multi_value))
        return run_sql(read_virtual[0](select) if read_virtual else select)

    def rows(select: exp.Expr) -> list[dict[str, Any]]:
        return _events(run(select))

    def finish(row: dict[str, Any]) -> dict[str, Any]:
        for name, compute in native.post_aggregators:
            row[name] = compute(row)
        return row

    if native.kind == "timeseries":
        found = {r.pop("__bucket"): r for r in rows(native.select([]).order_by(exp.column("__bucket", quoted=True)))}
        if not (query.get("context") or {}).get("skipEmptyBuckets"):  # Druid fills in empty buckets
            empty = {name: value for name, _, value in native.aggregators}
            found = {t: dict(empty) for t in _buckets(native)} | found
        ordered = sorted(found.items(), reverse=bool(query.get("descending")))
        return [{"timestamp": t, "result": finish(r)} for t, r in ordered]
    if native.kind == "topN":
        [(dimension, output)] = native.dimensions
        threshold = field(query, "threshold", "$", int)
        metric, descending = _topn_metric(query.get("metric"), output)
        spec = query.get("metric")
        stop = spec.get("previousStop") if isinstance(spec, Mapping) else None  # the values after it
        by_bucket: dict[str, list[dict[str, Any]]] = {}
        for row in rows(native.select([(dimension, output)])):
            if stop is None or (row[output] is not None and str(row[output]) > str(stop)):
                by_bucket.setdefault(row.pop("__bucket"), []).append(finish(row))
        return [{"timestamp": t, "result": sorted(  # ties in the dimension's order, as Druid's
            sorted(entries, key=lambda r: _sort_key(r.get(output))), key=lambda r: _sort_key(r.get(metric)),
            reverse=descending)[:threshold]} for t, entries in sorted(by_bucket.items())]
    if native.kind == "groupBy":
        dims = native.dimensions
        having = native.having
        grouped = native.select(dims) if having is None else having.select(native.select(dims))
        events = sorted((e for e in map(finish, rows(grouped)) if having is None or having.keep(e)),
                        key=lambda e: [_sort_key(e.get(name)) for _, name in dims])  # the dimensions' order, as Druid's
        events = _limit(events, query.get("limitSpec"))
        return [{"version": "v1", "timestamp": e.pop("__bucket"), "event": e} for e in events]
    if native.kind in ("timeBoundary", "dataSourceMetadata"):
        table = exp.Table(this=exp.to_identifier(native.datasource, quoted=True))
        select = exp.select(exp.alias_(exp.func("MIN", _col(_TIME)), "minTime", quoted=True),
                            exp.alias_(exp.func("MAX", _col(_TIME)), "maxTime", quoted=True)).from_(table)
        if query.get("filter") is not None:
            select = select.where(_filter(query["filter"], "$.filter"))
        [bounds] = rows(select)
        if bounds["minTime"] is None:
            return []
        if native.kind == "dataSourceMetadata":
            return [{"timestamp": bounds["maxTime"], "result": {"maxIngestedEventTime": bounds["maxTime"]}}]
        bound = query.get("bound")
        result = {k: v for k, v in bounds.items() if bound is None or k == bound}
        return [{"timestamp": bounds["minTime"] if bound != "maxTime" else bounds["maxTime"], "result": result}]
    if native.kind == "scan":
        return _scan(native, engine, run)
    if native.kind == "segmentMetadata":
        return _segment_metadata(native, spark, engine, limits)
    if native.kind == "search":
        return run_search(query, native.datasource, native.bucket(), native.where(), run)
    raise bad("$.queryType", f"{native.kind!r} is not supported (timeseries, topN, groupBy, scan, timeBoundary, "
                              "segmentMetadata, dataSourceMetadata, search are)")


def _events(result: QueryResult) -> list[dict[str, Any]]:
    """A result's rows as name -> value."""
    return [dict(zip(result.columns, row, strict=True)) for row in result.rows()]


def _scan(native: _Native, engine: sa.Engine, run: Callable[[exp.Expr], QueryResult]) -> list[dict[str, Any]]:
    """Rows as Druid's scan gives them: time in epoch ms, a multi-value dimension's values in a list."""
    query = native.query
    table = exp.Table(this=exp.to_identifier(native.datasource, quoted=True))
    columns = query.get("columns") or []
    if not (isinstance(columns, list) and all(isinstance(c, str) for c in columns)):
        raise bad("$.columns", f"expected a list of column names, got {columns!r}")
    lists = {name for name, kind in visible_set(engine, [native.datasource]).complex_columns(
        [native.datasource]).items() if kind == "multi_value"}
    if lists and not columns:  # every column, named: the multi-value ones are read as lists
        columns = run(exp.select(exp.Star()).from_(table).limit(0)).columns
    select = exp.select(*([exp.alias_(exp.func("MV_TO_ARRAY", _col(c)), c, quoted=True) if c in lists else
                           exp.alias_(_col(c), c, quoted=True) if c in native.virtual.columns else _col(c)
                           for c in columns] if columns else [exp.Star()])).from_(table)
    where = native.where()
    if where is not None:
        select = select.where(where)
    order = query.get("order", "none")
    if order not in ("none", "ascending", "descending"):
        raise bad("$.order", f"expected none, ascending or descending, got {order!r}")
    if order != "none":
        select = select.order_by(exp.Ordered(this=_col(_TIME), desc=order == "descending"))
    if query.get("limit") is not None:
        select = select.limit(field(query, "limit", "$", int))
    events = _events(run(select))
    for event in events:
        for name in lists.intersection(event):
            values = event[name]
            event[name] = values[0] if values and len(values) == 1 else values or None
        if isinstance(event.get(_TIME), str):
            event[_TIME] = int(datetime.fromisoformat(event[_TIME].replace("Z", "+00:00")).timestamp() * 1000)
    names = columns or (list(events[0]) if events else [])
    result_format = query.get("resultFormat", "list")
    if result_format not in ("list", "compactedList"):
        raise bad("$.resultFormat", f"expected list or compactedList, got {result_format!r}")
    shaped = events if result_format == "list" else [[e.get(n) for n in names] for e in events]
    return [{"segmentId": native.datasource, "columns": names, "events": shaped}] if events else []


_DRUID_TYPES = {"timestamp": "LONG", "string": "STRING", "large_string": "STRING", "int64": "LONG", "int32": "LONG",
                "double": "DOUBLE", "float": "FLOAT", "bool": "LONG"}


def _segment_metadata(native: _Native, spark: SparkSession, engine: sa.Engine,
                      limits: QueryLimits) -> list[dict[str, Any]]:
    """One merged analysis of the datasource's visible segments in the intervals (``merge: true``)."""
    if native.query.get("merge") is not True:
        raise bad("$.merge", "only merged analyses (\"merge\": true) are supported")
    segments = [s for s in visible_segments(engine, native.datasource) if not native.intervals
                or any(s.interval_start < end and s.interval_end > start for start, end in native.intervals)]
    if not segments:
        return []
    empty = exp.select(exp.Star()).from_(exp.Table(this=exp.to_identifier(native.datasource, quoted=True))).limit(0)
    schema = execute_sql(spark, engine, empty.sql(dialect="druid"), limits=limits).table.schema
    columns = {field.name: {"typeSignature": _DRUID_TYPES.get(str(field.type).split("[")[0], "COMPLEX"),
                            "type": _DRUID_TYPES.get(str(field.type).split("[")[0], "COMPLEX"),
                            "hasMultipleValues": False, "hasNulls": field.name != _TIME, "size": 0,
                            "cardinality": None, "minValue": None, "maxValue": None, "errorMessage": None}
               for field in schema}
    start, end = min(s.interval_start for s in segments), max(s.interval_end for s in segments)
    return [{"id": "merged", "intervals": [f"{_format(start)}/{_format(end)}"], "columns": columns,
             "size": sum(s.size_bytes for s in segments), "numRows": sum(s.num_rows for s in segments),
             "aggregators": None, "timestampSpec": None, "queryGranularity": None, "rollup": None}]


def _sort_key(value: Any) -> tuple[bool, Any]:
    return (value is not None, value if value is not None else 0)


def _topn_metric(metric: Any, dimension: str) -> tuple[str, bool]:
    if isinstance(metric, str):
        return metric, True
    if isinstance(metric, Mapping) and metric.get("type") == "numeric":
        return str(metric.get("metric")), True
    if isinstance(metric, Mapping) and metric.get("type") == "inverted":
        inner, descending = _topn_metric(metric.get("metric"), dimension)
        return inner, not descending
    if isinstance(metric, Mapping) and metric.get("type") in ("dimension", "lexicographic", "alphaNumeric"):
        return dimension, False
    raise bad("$.metric", f"expected a metric name or a numeric/inverted/dimension metric spec, got {metric!r}")


def _limit(events: list[dict[str, Any]], spec: Any) -> list[dict[str, Any]]:
    if spec is None:
        return sorted(events, key=lambda e: e["__bucket"])
    if not isinstance(spec, Mapping) or spec.get("type", "default") != "default":
        raise bad("$.limitSpec", "only the default limitSpec is supported")
    for column in reversed(spec.get("columns") or []):
        name = column if isinstance(column, str) else column.get("dimension")
        descending = isinstance(column, Mapping) and column.get("direction") == "descending"
        events = sorted(events, key=lambda e: _sort_key(e.get(name)), reverse=descending)
    return events[:spec["limit"]] if spec.get("limit") is not None else events


def _buckets(native: _Native) -> Iterator[str]:
    """Every bucket start of the query's intervals, formatted as the engine formats timestamps.

    Only ``all`` and fixed-length periods are filled; calendar periods (months, years) and
    ``none`` return the buckets that have rows.
    """
    if native.granularity is None:
        yield from (_format(start) for start, _ in native.intervals[:1])
        return
    period = parse_period(native.granularity)
    if period is None or period[1] not in MILLIS:
        return
    count, unit = period
    step_ms = count * MILLIS[unit]
    for start, end in native.intervals:
        if (count, unit) == (1, "WEEK"):  # weeks start on Monday
            t = start.replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=start.weekday())
        else:  # whole periods from the epoch, as TIME_FLOOR counts them
            millis = int(start.timestamp() * 1000)
            t = datetime.fromtimestamp((millis - millis % step_ms) / 1000, UTC)
        while t < end:
            yield _format(t)
            t += timedelta(milliseconds=step_ms)


def _format(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"
