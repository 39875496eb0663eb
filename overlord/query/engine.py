"""SQL over published segments: Spark SQL on exactly the files the timeline says are visible.

Each referenced datasource becomes a temporary view over its visible files (``__time``, the
dimensions, the metrics), so a query never reads an unpublished, unused or overshadowed file;
when the query's ``__time`` filters prove some of those files cannot match
(:mod:`overlord.query.time_pruning`), its view leaves them out, under the datasource's full schema.
The dialect is Spark SQL with Druid's quoting: ``"name"`` is an identifier, ``'text'`` a string.
Queries run on a child session of the shared SparkSession (same cluster, own views, own
configuration) and pass the sandbox (:mod:`overlord.query.sandbox`) twice: on the parsed plan
before Spark analyses the query, on the analyzed plan before anything runs. Reading files by
path (``parquet.`/path```) is switched off as well (``spark.sql.runSQLOnFiles``).

User errors (syntax, unknown datasource or column, not read-only, division by zero) raise
:class:`QueryError`, an HTTP 400 carrying Spark's message; anything else is a server fault.
Every query runs within :class:`QueryLimits`: its text length, its time (its Spark jobs, in
the ``query`` scheduler pool, are cancelled when it is up) and its result's rows and bytes (a
result is collected into the overlord's memory; a bigger one is refused with a 400 rather than
risking the process). Druid's ``context.sqlOuterLimit`` cuts a result to its first rows (as
the cap allows), ``context.timeout`` shortens the time limit.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import threading
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from contextlib import ExitStack
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any
from weakref import WeakKeyDictionary

import duckdb
import pyarrow as pa
import sqlalchemy as sa
from py4j.protocol import Py4JJavaError
from pydantic import BaseModel, ConfigDict, Field
from pyspark.errors import AnalysisException, PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, DoubleType, LongType, StringType, StructField, StructType

from overlord.config import Settings
from overlord.query.column_types import column_kinds, table_columns
from overlord.query.druid_sql import FUNCTIONS, UTC_NAMES, Translation, metadata_view, translate
from overlord.query.formats import CONTENT_TYPES, QueryResult, ResultFormat, format_result
from overlord.query.local_engine import LocalEngine
from overlord.query.metadata_tables import build_metadata_table
from overlord.query.query_errors import QueryError
from overlord.query.running import RunningQuery, running_query
from overlord.query.sandbox import DENIED_FUNCTIONS, PlanWalker, check_analyzed, check_parsed, relations
from overlord.query.segment_source import read_segments
from overlord.query.time_pruning import TimeRange, time_ranges
from overlord.query.value_sizes import row_count, value_sizes
from segment_store.records import SegmentRecord
from segment_store.segment_cache import SegmentCache, is_object_store
from segment_store.timeline import VisibleSet, visible_set
from segment_store.value_types import widest_types

__all__ = ["QueryLimits", "SqlQuery", "execute_sql", "run_sql"]

_EXPLAIN = re.compile(r"\s*EXPLAIN\s+PLAN\s+FOR\s+", re.IGNORECASE)
"""Druid's ``EXPLAIN PLAN FOR <query>``: the query's plan, not its rows."""

ANSWERED_BY: ContextVar[str | None] = ContextVar("answered_by", default=None)
"""The engine that answered this thread's last query (``spark`` or ``duckdb``): the query engine reports it."""

logger = logging.getLogger(__name__)



def _default(name: str) -> Any:
    return Settings.model_fields[name].default


@dataclass(frozen=True)
class QueryLimits:
    """What one query may use; the defaults are the settings' defaults (``OVERLORD_QUERY_*``)."""

    max_rows: int = _default("query_max_rows")
    max_bytes: int = _default("query_max_bytes")
    timeout_ms: int = _default("query_timeout_ms")
    max_length: int = _default("query_max_length")

    @classmethod
    def from_settings(cls, settings: Settings) -> QueryLimits:
        return cls(settings.query_max_rows, settings.query_max_bytes, settings.query_timeout_ms,
                   settings.query_max_length)


class SqlParameter(BaseModel):
    """A dynamic parameter (``?``), Druid-style: ``{"type": "VARCHAR", "value": "DE"}``."""

    model_config = ConfigDict(frozen=True)
    type: str = "VARCHAR"
    value: Any


class SqlQuery(BaseModel):
    """The body of ``POST /druid/v2/sql`` (Druid's shape; unknown fields are ignored)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")
    query: str = Field(min_length=1)
    result_format: ResultFormat = Field(default="object", alias="resultFormat")
    header: bool = False
    types_header: bool = Field(default=False, alias="typesHeader")
    sql_types_header: bool = Field(default=False, alias="sqlTypesHeader")
    context: dict[str, Any] = {}
    parameters: tuple[SqlParameter, ...] = ()

    def query_id(self) -> str:
        """The context's ``sqlQueryId``, or a new random id."""
        given = self.context.get("sqlQueryId")
        return str(given) if given is not None else uuid.uuid4().hex

    def run(self, spark: SparkSession, engine: sa.Engine, limits: QueryLimits = QueryLimits(),
            query_id: str | None = None, local: LocalEngine | None = None
            ) -> list[dict[str, Any]] | list[list[Any]] | str:
        """Run with the context's ``sqlOuterLimit`` and ``timeout`` (within ``limits``) as ``query_id``."""
        zone = self.context.get("sqlTimeZone")
        if zone is not None and str(zone).upper() not in UTC_NAMES:
            raise QueryError(f"context.sqlTimeZone: {zone!r} is not supported; queries run in UTC",
                             "INVALID_CONTEXT")
        outer = self._context_int("sqlOuterLimit", 0)
        limits = self.limits(limits)
        for field, given in (("typesHeader", self.types_header), ("sqlTypesHeader", self.sql_types_header)):
            if given and not self.header:
                raise QueryError(f"{field}: requires header to be true", "INVALID_INPUT")
        return run_sql(spark, engine, self.query, self.result_format, self.header,
                       [p.value for p in self.parameters], limits, outer, query_id=query_id or self.query_id(),
                       local=local, types_header=self.types_header, sql_types_header=self.sql_types_header)

    def limits(self, limits: QueryLimits) -> QueryLimits:
        """``limits`` with the context's ``timeout``, which may lower the time limit but not raise it."""
        timeout = self._context_int("timeout", 1)
        if timeout is None:
            return limits
        if timeout > limits.timeout_ms:
            raise QueryError(f"context.timeout: at most {limits.timeout_ms} ms (OVERLORD_QUERY_TIMEOUT_MS), "
                             f"got {timeout}", "INVALID_CONTEXT")
        return replace(limits, timeout_ms=timeout)

    def _context_int(self, key: str, minimum: int) -> int | None:
        """An integer context value; a text of digits counts too (Druid reads ``"60000"``, Grafana sends it)."""
        value = self.context.get(key)
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < minimum):
            raise QueryError(f"context.{key}: expected an integer >= {minimum}, got {value!r}", "INVALID_CONTEXT")
        return value


class _QuerySession:
    """The child session queries run on, its views' file lists, and what the read-only check learnt."""

    def __init__(self, spark: SparkSession) -> None:
        self.session = spark.newSession()
        conf = self.session.conf
        conf.set("spark.sql.session.timeZone", "UTC")
        conf.set("spark.sql.runSQLOnFiles", "false")
        conf.set("spark.sql.ansi.enabled", "true")
        conf.set("spark.sql.ansi.doubleQuotedIdentifiers", "true")  # "count", "my-datasource", as in Druid SQL
        conf.set("spark.sql.sources.parallelPartitionDiscovery.threshold", "100000")  # list files without a job
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        registry = self.session._jsparkSession.sessionState().functionRegistry()
        listed = registry.listFunction()
        self.functions = frozenset(str(listed.apply(i).funcName()).lower() for i in range(listed.length()))
        for name in DENIED_FUNCTIONS & self.functions:  # gone from the registry too, not just refused
            registry.dropFunction(jvm.org.apache.spark.sql.catalyst.FunctionIdentifier(
                name, jvm.scala.Some("builtin"), jvm.scala.Some("system")))
        self.walker = PlanWalker(jvm)
        self._jvm = jvm
        # PySpark logs every captured error with query context at ERROR, stack trace included; a user's
        # bad query is not a server error, and QueryError carries the message.
        logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
        self._parser = self.session._jsparkSession.sessionState().sqlParser()
        self.lock = threading.Lock()
        self.frames: dict[str, tuple[tuple[str, ...], DataFrame]] = {}

    def parse(self, query: str) -> Any:
        """The parsed (unresolved) plan, a JVM object; a syntax error raises :class:`QueryError`."""
        jvm_session = self._jvm.org.apache.spark.sql.SparkSession
        previous = jvm_session.getActiveSession()
        jvm_session.setActiveSession(self.session._jsparkSession)  # the parser reads this session's conf
        try:
            return self._parser.parsePlan(query)
        except PySparkException as exc:
            raise _user_error(exc) or exc from None
        finally:
            if previous.isDefined():
                jvm_session.setActiveSession(previous.get())
            else:
                jvm_session.clearActiveSession()


_sessions: WeakKeyDictionary[SparkSession, _QuerySession] = WeakKeyDictionary()
_sessions_lock = threading.Lock()


def _query_session(spark: SparkSession) -> _QuerySession:
    with _sessions_lock:
        if spark not in _sessions:
            _sessions[spark] = _QuerySession(spark)
        return _sessions[spark]


@dataclass(frozen=True)
class FileLayout:
    """What a segment's descriptor says of the columns whose form differs between a datasource's files."""

    lists: frozenset[str] = frozenset()
    """Multi-value dimensions stored as lists (a string in other files)."""
    types: frozenset[tuple[str, str]] = frozenset()
    """Typed schema discovery's columns and their types in this file (another in other files, maybe)."""

    @classmethod
    def of(cls, descriptor: Mapping[str, Any]) -> FileLayout:
        kinds = descriptor.get("complex_columns", {})
        return cls(frozenset(name for name, kind in kinds.items() if kind == "multi_value"),
                   frozenset(descriptor.get("discovered_types", {}).items()))


_SPARK_TYPES = {"long": LongType(), "double": DoubleType(), "string": StringType()}


def _read(session: SparkSession, paths: tuple[str, ...], storage_options: Mapping[str, Any] | None,
          schema: StructType | None = None, layouts: Mapping[str, FileLayout] | None = None) -> DataFrame:
    """Spark's Parquet reader for local and HDFS files; the fsspec source for object stores.

    Without ``schema``, the union of the files' schemas (columns of every spec version).
    ``layouts``: each file's :class:`FileLayout`, for every file of the datasource. Files are read
    in groups of one layout: a multi-value dimension's strings become one-element lists, and a
    discovered column takes the least restrictive of its types in all files (``schema``'s if given).
    """
    every = frozenset().union(*(layout.lists for layout in (layouts or {}).values()))
    discovered = widest_types(dict(layout.types) for layout in (layouts or {}).values())
    if (every or discovered) and paths:
        groups: dict[FileLayout, list[str]] = {}
        for path in paths:
            groups.setdefault((layouts or {}).get(path, FileLayout()), []).append(path)
        frames = []
        for group in groups.values():  # each read as its files are: strings, or lists; one type per column
            frame = _read(session, tuple(group), storage_options)
            for name in every & set(frame.columns):
                if not isinstance(frame.schema[name].dataType, ArrayType):
                    frame = frame.withColumn(name, F.when(F.col(name).isNull(), None).otherwise(F.array(name)))
            frames.append(frame)
        final = schema or StructType([StructField(name, _SPARK_TYPES[kind]) for name, kind in widest_types(
            _value_types(frame.schema, discovered) for frame in frames).items()])
        widest = {f.name: f.dataType for f in final if f.name in discovered}
        frames = [frame.withColumns({name: F.col(name).cast(kind) for name, kind in widest.items()
                                     if name in frame.columns and frame.schema[name].dataType != kind})
                  for frame in frames]
        union = functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames)
        if schema is None:
            return union
        return union.select(*(F.col(f.name).cast(f.dataType) if f.name in union.columns
                              else F.lit(None).cast(f.dataType).alias(f.name) for f in schema))
    if not paths and schema is not None:
        return session.createDataFrame([], schema)
    if not any(map(is_object_store, paths)):
        if schema is not None:
            return session.read.schema(schema).parquet(*paths)
        return _with_pair_offsets(session.read.option("mergeSchema", "true").parquet(*paths))
    return _with_pair_offsets(read_segments(session, paths, storage_options, schema))


def _with_pair_offsets(frame: DataFrame) -> DataFrame:
    """``frame`` with an ``offset`` in every first/last pair: null in pairs written before offsets were stored."""
    old = [f.name for f in frame.schema if isinstance(f.dataType, StructType) and f.dataType.names == ["lhs", "rhs"]]
    return frame.withColumns({name: F.col(name).withField("offset", F.lit(None).cast(LongType())) for name in old})


def _value_types(schema: StructType, names: Iterable[str]) -> dict[str, str]:
    """The discovered types (long, double, string) of the columns ``names`` of ``schema``."""
    types: dict[DataType, str] = {kind: name for name, kind in _SPARK_TYPES.items()}
    return {f.name: types[f.dataType] for f in schema if f.name in names and f.dataType in types}


def _view(datasource: str) -> str:
    return "`" + datasource.replace("`", "``") + "`"


def _register_views(qs: _QuerySession, timeline: VisibleSet, names: set[str],
                    storage_options: Mapping[str, Any] | None, ranges: Mapping[str, TimeRange] | None = None) -> None:
    """Point a view per referenced datasource at exactly its visible files (caller holds the lock).

    ``ranges`` (by lower-case name, from :func:`time_ranges`) narrow a view to the files its
    range must read, under the schema of all its files (zero rows if none is left): the
    columns of the view, and so any result, do not depend on which files were left out.
    ``qs.frames`` keeps the views over all the files.
    """
    for gone in [ds for ds in qs.frames if ds not in timeline.datasources]:  # no used segments any more
        qs.session.catalog.dropTempView(gone)
        del qs.frames[gone]
    for name in sorted(names):
        datasource = timeline.resolve(name)
        if datasource is None:
            continue  # a CTE name, or unknown: Spark reports TABLE_OR_VIEW_NOT_FOUND with the name
        segments = timeline.segments[datasource]
        paths = tuple(s.path for s in segments)
        if not paths:
            raise QueryError(f"datasource {datasource!r} has no published segments", "TABLE_OR_VIEW_NOT_FOUND")
        time_range = (ranges or {}).get(name.lower())
        kept = paths if time_range is None else tuple(s.path for s in segments if time_range.reads(s))
        layouts = {s.path: FileLayout.of(s.descriptor) for s in segments}
        try:
            cached = qs.frames.get(datasource)
            if cached is None or cached[0] != paths:
                cached = (paths, _read(qs.session, paths, storage_options, layouts=layouts))
                qs.frames[datasource] = cached
            frame = cached[1] if kept == paths else _read(qs.session, kept, storage_options, cached[1].schema,
                                                          layouts)
        except PySparkException as exc:
            raise _user_error(exc) or exc from None
        frame.createOrReplaceTempView(_view(datasource))


def _register_metadata(qs: _QuerySession, engine: sa.Engine, timeline: VisibleSet, tables: frozenset[str],
                       storage_options: Mapping[str, Any] | None) -> set[str]:
    """Views of the metadata tables a query reads, as of ``timeline``; their names (caller holds the lock)."""
    def datasource_schemas() -> dict[str, Any]:
        schemas = {}
        for name in timeline.datasources:
            try:
                _register_views(qs, timeline, {name}, storage_options)
            except (PySparkException, Py4JJavaError, QueryError, pa.ArrowInvalid, OSError) as exc:  # unreadable
                logger.warning("INFORMATION_SCHEMA.COLUMNS leaves out %s: its files cannot be read: %s", name,
                               str(exc).splitlines()[0])
                continue
            kinds = timeline.complex_columns([name])  # sketches and first/last pairs: Druid names their types
            schemas[name] = StructType([StructField(f.name, f.dataType, f.nullable, {"kind": kinds[f.name]})
                                        if f.name in kinds else f for f in qs.frames[name][1].schema])
        return schemas

    for table in tables:
        build_metadata_table(qs.session, table, engine, datasource_schemas, FUNCTIONS).createOrReplaceTempView(
            metadata_view(table))
    return {metadata_view(table).lower() for table in tables}


_USER_STATES = frozenset({"0A", "21", "22", "23", "42", "54", "P0"})
"""SQLSTATE classes of a query's own mistakes: feature not supported, cardinality (a scalar subquery's
rows), data (a bad cast, an overflow), integrity (a duplicate map key), syntax and access, program limits,
a raised error (the only one a query may raise: a collection past Druid's ``maxBytes``)."""


def _user_error(exc: PySparkException) -> QueryError | None:
    """The QueryError for a user's mistake (:data:`_USER_STATES`), None for anything else."""
    state = exc.getSqlState() or ""
    if not isinstance(exc, AnalysisException) and state[:2] not in _USER_STATES:
        return None
    message = str(exc).strip()
    cut = message.find(";\n")  # Spark appends the plan to analysis errors
    return QueryError(message[:cut + 1] if cut >= 0 else message[:2_000], exc.getCondition())


def _java_user_error(exc: Py4JJavaError) -> QueryError | None:
    """The QueryError for a user's mistake that reached us wrapped in a job's failure.

    (A scalar subquery's rows are counted in a job of its own.) The first Spark error among its causes.
    """
    cause = exc.java_exception
    for _ in range(10):
        if cause is None:
            return None
        try:
            state, condition = cause.getSqlState(), cause.getCondition()
        except Exception:  # not a SparkThrowable
            state = condition = None
        if state is not None:
            return QueryError(str(cause.getMessage())[:2_000], str(condition)) if str(state)[:2] in _USER_STATES \
                else None
        cause = cause.getCause()  # a wrapper (awaitResult's, a job's): look at its cause
    return None


def execute_sql(spark: SparkSession, engine: sa.Engine, query: str, parameters: Sequence[Any] = (),
                limits: QueryLimits = QueryLimits(), outer_limit: int | None = None,
                storage_options: Mapping[str, Any] | None = None, query_id: str | None = None,
                local: LocalEngine | None = None) -> QueryResult:
    """Run a read-only SQL query over the datasources' visible segments; :class:`QueryError` if invalid.

    ``outer_limit`` keeps the first rows of the result; a result past ``limits`` is refused.
    ``storage_options`` reach fsspec for object-store segments (otherwise s3fs takes credentials
    and endpoint from the environment). ``query_id`` (Druid's ``sqlQueryId``) lets it be cancelled.
    With ``local``, a small query DuckDB answers as Spark would runs there (:mod:`overlord.query.local_engine`).
    """
    if len(query) > limits.max_length:
        raise QueryError(f"the query has {len(query):,} characters; the limit is {limits.max_length:,} "
                         "(OVERLORD_QUERY_MAX_LENGTH)", "QUERY_TOO_LONG")
    explain = _EXPLAIN.match(query)
    cache = local.cache if local is not None else None
    translation, timeline = _translate(engine, query[explain.end():] if explain else query, storage_options, cache)
    cut = limits.max_rows + 1 if outer_limit is None else min(outer_limit, limits.max_rows + 1)
    with ExitStack() as leases, running_query(spark, query_id or uuid.uuid4().hex, limits.timeout_ms / 1000) as running:
        table = None if local is None or explain else _run_local(local, engine, timeline, translation, parameters,
                                                                 cut, running, limits, leases)
        result = QueryResult(table, "duckdb") if table is not None else QueryResult(
            _run_spark(spark, engine, timeline, translation, parameters, cut, storage_options, running, limits,
                       explain=explain is not None, cache=cache, leases=leases))
    if result.table.num_rows > limits.max_rows:
        raise QueryError(f"the result has more than {limits.max_rows:,} rows (the overlord's limit, "
                         "OVERLORD_QUERY_MAX_ROWS): aggregate further, add a LIMIT or set context.sqlOuterLimit",
                         "RESULT_TOO_LARGE")
    if result.table.nbytes > limits.max_bytes:
        raise QueryError(f"the result has {result.table.nbytes:,} bytes, more than the overlord's limit of "
                         f"{limits.max_bytes:,} (OVERLORD_QUERY_MAX_BYTES): select fewer or smaller columns",
                         "RESULT_TOO_LARGE")
    logger.debug("query returned %d rows on %s: %s", result.table.num_rows, result.engine, query)
    ANSWERED_BY.set(result.engine)
    return result


def _translate(engine: sa.Engine, query: str, storage_options: Mapping[str, Any] | None = None,
               cache: SegmentCache | None = None) -> tuple[Translation, VisibleSet]:
    """The query in Spark SQL and the one read of the timeline everything about the query comes from.

    The translation knows which of the columns it reads hold sketches, first/last pairs or lists,
    and the types of those it compares with numbers, sums or ranks (:mod:`overlord.query.column_types`).
    """
    translation = translate(query)
    timeline = visible_set(engine, None if translation.metadata_tables else translation.table_names)
    if not translation.columns or not translation.table_names:
        return translation, timeline
    tables = tuple(sorted(table_columns(timeline, translation.star_tables, storage_options).items()))
    found = {name.lower(): kind for name, kind in timeline.complex_columns(translation.table_names).items()}
    kinds = {name: kind for name, kind in found.items() if name in translation.complex_arguments
             or (name in translation.columns and kind == "multi_value")}
    if translation.typed_columns - found.keys():
        kinds |= column_kinds(timeline, translation.table_names, translation.typed_columns - found.keys(),
                              storage_options, cache.copy_of if cache is not None else lambda _path: None)
    return (translate(query, tuple(sorted(kinds.items())), tables) if kinds or tables else translation), timeline


def _run_spark(spark: SparkSession, engine: sa.Engine, timeline: VisibleSet, translation: Translation,
               parameters: Sequence[Any], cut: int, storage_options: Mapping[str, Any] | None,
               running: RunningQuery, limits: QueryLimits, explain: bool = False, cache: SegmentCache | None = None,
               leases: ExitStack | None = None) -> pa.Table:
    """The query's answer from Spark; with ``explain``, its plan instead (after the same checks).

    Spark reads the segment cache's copies it finds (held in ``leases``), the object store for the rest.
    """
    qs = _query_session(spark)
    nodes = check_parsed(qs.walker, qs.parse(translation.sql), qs.functions)
    names = relations(nodes)
    timeline = _covering(engine, timeline, names)
    if leases is not None and (spark.sparkContext.master or "").startswith("local"):  # executors elsewhere: no copies
        timeline = _localized(timeline, _held_copies(cache, timeline.segments.values(), leases))
    ranges = time_ranges(translation.sql, Counter(name.lower() for name in names))
    try:
        with qs.lock:  # views and analysis together: the plan binds the file lists registered here
            try:
                _register_views(qs, timeline, set(names), storage_options, ranges)
                metadata = _register_metadata(qs, engine, timeline, translation.metadata_tables, storage_options)
                frame = qs.session.sql(translation.sql, args=list(parameters) or None)
                views = {name.lower() for name in qs.frames} | metadata
                files = {datasource.lower(): qs.frames[datasource][0] for name in names
                         if (datasource := timeline.resolve(name)) in qs.frames}
            finally:  # a view reached by a name no query registers (session.x) must not stay pruned
                for datasource, (_, full) in qs.frames.items():
                    if datasource.lower() in ranges:
                        full.createOrReplaceTempView(_view(datasource))
        _check_analyzed(qs, frame._jdf.queryExecution().analyzed(), views, files, storage_options)
        if explain:
            return _plan(translation, timeline, ranges, frame._jdf.queryExecution().optimizedPlan().toString())
        table = frame.limit(cut).toArrow()
        _raise_if_stopped(running, limits)  # an answer that came after the timeout is not given either
        return table
    except (PySparkException, Py4JJavaError) as exc:
        _raise_if_stopped(running, limits)
        raise (_user_error(exc) if isinstance(exc, PySparkException) else _java_user_error(exc)) or exc from None


def _check_analyzed(qs: _QuerySession, analyzed: Any, views: set[str], files: Mapping[str, tuple[str, ...]],
                    storage_options: Mapping[str, Any] | None) -> None:
    """The sandbox's check of the analyzed plan, with the datasources' files' bounds if the default's fail.

    A value past the limit with every column at the default bound is checked again with the bounds the
    files give (:mod:`overlord.query.value_sizes`), and their row counts (which bound a collecting
    aggregate): their footers are read only for such a query.
    """
    try:
        check_analyzed(qs.walker, analyzed, views)
    except QueryError as exc:
        if exc.error_class != "VALUE_TOO_LARGE" or not files:
            raise
        sizes = {datasource: value_sizes(paths, storage_options) for datasource, paths in files.items()}
        rows = {datasource: count for datasource, paths in files.items()
                if (count := row_count(paths, storage_options)) is not None}
        check_analyzed(qs.walker, analyzed, views, sizes, rows)


def _plan(translation: Translation, timeline: VisibleSet, ranges: Mapping[str, Any], spark_plan: str) -> pa.Table:
    """Druid's ``EXPLAIN PLAN FOR`` answer: PLAN, RESOURCES and ATTRIBUTES, each JSON text.

    The plan: the Spark SQL the query became, the segments of each datasource and those its time
    filter leaves to read, and Spark's optimized plan.
    """
    read = {}
    for name in sorted(translation.table_names):
        datasource = timeline.resolve(name)
        if datasource is None or datasource not in timeline.segments:
            continue
        segments, time_range = timeline.segments[datasource], ranges.get(name)
        kept = [s for s in segments if time_range is None or time_range.reads(s)]
        read[datasource] = {"segments": len(segments), "segmentsRead": len(kept),
                            "bytesRead": sum(s.size_bytes for s in kept)}
    plan = {"sparkSql": translation.sql, "datasources": read, "sparkPlan": spark_plan}
    resources = [{"name": datasource, "type": "DATASOURCE"} for datasource in read]
    return pa.table({"PLAN": [json.dumps(plan)], "RESOURCES": [json.dumps(resources)],
                     "ATTRIBUTES": [json.dumps({"statementType": "SELECT", "targetDataSource": None})]})


def _covering(engine: sa.Engine, timeline: VisibleSet, names: Iterable[str]) -> VisibleSet:
    """``timeline``, or a new read of it when a parser saw a datasource the translation did not.

    (A ```quoted-name```.) Every datasource of the query then comes from that one read.
    """
    unread = {ds for name in names if (ds := timeline.resolve(name)) is not None and ds not in timeline.segments}
    return visible_set(engine, set(timeline.segments) | unread) if unread else timeline


def _run_local(local: LocalEngine, engine: sa.Engine, timeline: VisibleSet, translation: Translation,
               parameters: Sequence[Any], cut: int, running: RunningQuery, limits: QueryLimits,
               leases: ExitStack) -> pa.Table | None:
    """The query's answer from DuckDB, or None when it is for Spark to answer.

    On an object store, the files it reads must be in the segment cache: those missing are
    downloaded first (all held in ``leases``). The query reads them whichever engine answers it:
    Spark reads the copies too.
    """
    references = None if translation.metadata_tables else local.references(translation.sql)
    if not references:
        return None
    timeline = _covering(engine, timeline, references)
    known = {name.lower(): ds for name in references
             if (ds := timeline.resolve(name)) is not None and ds in timeline.segments}
    counts = Counter[str]()
    for name, n in references.items():
        counts[name.lower()] += n
    if not counts.keys() <= known.keys():
        return None
    ranges = time_ranges(translation.sql, counts)
    every = {known[name]: timeline.segments[known[name]] for name in counts}
    kept = {ds: [s for s in segments if (r := ranges.get(name)) is None or r.reads(s)]
            for name, ds in known.items() if ds in every for segments in [every[ds]]}
    if sum(s.size_bytes for segments in kept.values() for s in segments) > local.max_bytes:
        return None
    if local.cache is not None:  # waited for within the query's time (the rest is then read from the object store)
        leases.enter_context(local.cache.lease((s for segments in kept.values() for s in segments),
                                               timeout_s=running.left_s()))
    copies = _held_copies(local.cache, every.values(), leases)
    try:
        schemas = {ds: local.spark_schema([copies.get(s.path, s.path) for s in segments])
                   for ds, segments in every.items()}
        complete = {name: schema for name, schema in schemas.items() if schema is not None}
        sql = local.plan(translation.sql, complete, parameters) if len(complete) == len(schemas) else None
        if sql is None or local.tables(sql) != {name.lower() for name in every}:
            return None
        views = {ds: ([copies.get(s.path, s.path) for s in segments], [copies.get(s.path, s.path) for s in kept[ds]])
                 for ds, segments in every.items()}
        if not local.fits([path for _, read in views.values() for path in read], 0):
            return None
        table = local.run(sql, views, cut, lambda cursor: running.interrupt_with(cursor.interrupt))
    except (duckdb.Error, pa.ArrowInvalid, OSError) as exc:  # OSError: a file gone (compacted, cleaned up)
        _raise_if_stopped(running, limits)
        logger.info("DuckDB did not answer the query, Spark will (%s): %s", str(exc).splitlines()[0],
                    translation.sql)
        return None
    _raise_if_stopped(running, limits)
    return table


def _held_copies(cache: SegmentCache | None, segments: Iterable[Iterable[SegmentRecord]], leases: ExitStack
                 ) -> dict[str, str]:
    """The cached copies of ``segments`` (none downloaded), held until ``leases`` closes: local path by path."""
    if cache is None:
        return {}
    return dict(leases.enter_context(cache.lease((s for group in segments for s in group), download=False)))


def _localized(timeline: VisibleSet, copies: Mapping[str, str]) -> VisibleSet:
    """``timeline`` with each segment whose file has a copy pointing at the copy."""
    if not copies:
        return timeline
    return VisibleSet(timeline.datasources, {ds: [replace(s, path=copies.get(s.path, s.path)) for s in segments]
                                             for ds, segments in timeline.segments.items()})


def _raise_if_stopped(running: RunningQuery, limits: QueryLimits) -> None:
    if running.reason == "timeout":
        raise _timed_out(limits) from None
    if running.reason == "cancelled":
        raise QueryError(f"query {running.query_id} was cancelled (DELETE /druid/v2/sql/{{id}})",
                         "QUERY_CANCELLED") from None


def _timed_out(limits: QueryLimits) -> QueryError:
    return QueryError(f"the query ran longer than its timeout of {limits.timeout_ms:,} ms (context.timeout, at "
                      "most OVERLORD_QUERY_TIMEOUT_MS); its Spark jobs were cancelled", "QUERY_TIMEOUT")


def run_sql(spark: SparkSession, engine: sa.Engine, query: str, result_format: ResultFormat = "object",
            header: bool = False, parameters: Sequence[Any] = (), limits: QueryLimits = QueryLimits(),
            outer_limit: int | None = None, query_id: str | None = None, local: LocalEngine | None = None,
            types_header: bool = False, sql_types_header: bool = False
            ) -> list[dict[str, Any]] | list[list[Any]] | str:
    """Druid's ``POST /druid/v2/sql``: rows as JSON-ready lists/dicts (object, array) or text (csv, *Lines)."""
    if result_format not in CONTENT_TYPES:
        raise QueryError(f"resultFormat must be one of {sorted(CONTENT_TYPES)}, got {result_format!r}",
                         "INVALID_RESULT_FORMAT")
    result = execute_sql(spark, engine, query, parameters, limits, outer_limit, query_id=query_id, local=local)
    return format_result(result, result_format, header, types_header, sql_types_header)
