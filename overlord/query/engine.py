"""SQL over published segments: Spark SQL on exactly the files the timeline says are visible.

Each referenced datasource becomes a temporary view over its visible files (``__time``, the
dimensions, the metrics), so a query never reads an unpublished, unused or overshadowed file.
The dialect is Spark SQL with Druid's quoting: ``"name"`` is an identifier, ``'text'`` a string.
Queries run on a child session of the shared SparkSession (same cluster, own views, own
configuration) and must be read-only:

* the text must parse (Spark's own parser) as one statement whose plan consists only of query
  operators (an allow-list: no commands, inserts, ``EXECUTE IMMEDIATE``, ``TRANSFORM ... USING``);
* ``reflect``, ``java_method`` and ``try_reflect`` (calls into the JVM) are rejected, and are
  also dropped from the child session's function registry;
* reading files by path (``parquet.`/path```) is switched off (``spark.sql.runSQLOnFiles``).

User errors (syntax, unknown datasource or column, not read-only, division by zero) raise
:class:`QueryError`, an HTTP 400 carrying Spark's message; anything else is a server fault.
A result is collected into the overlord's memory, so it is capped (``max_rows``): a bigger one
is refused with a 400 rather than risking the process. Druid's ``context.sqlOuterLimit`` cuts a
result to its first rows (as the cap allows).
"""

from __future__ import annotations

import base64
import csv
import io
import json
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any, Literal
from weakref import WeakKeyDictionary

import pyarrow as pa
import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field
from pyspark.errors import AnalysisException, PySparkException
from pyspark.sql import DataFrame, SparkSession

from overlord.config import Settings
from overlord.errors import OverlordError
from overlord.query.segment_source import read_segments
from segment_store.timeline import datasources, visible_segments

__all__ = ["CONTENT_TYPES", "QueryError", "QueryResult", "SqlQuery", "execute_sql", "format_result", "format_table",
           "run_sql"]

ResultFormat = Literal["object", "array", "objectLines", "arrayLines", "csv"]
CONTENT_TYPES: dict[str, str] = {"object": "application/json", "array": "application/json",
                                 "objectLines": "text/plain", "arrayLines": "text/plain", "csv": "text/csv"}
"""Druid's result formats and the Content-Type of each response."""

logger = logging.getLogger(__name__)

MAX_ROWS = Settings.query_max_rows
"""Default cap on a result's rows (``OVERLORD_QUERY_MAX_ROWS``)."""

_JVM_FUNCTIONS = ("reflect", "java_method", "try_reflect")
_QUERY_OPERATORS = frozenset({
    "Aggregate", "Distinct", "Except", "Filter", "Generate", "GlobalLimit", "Intersect", "Join", "LateralJoin",
    "LocalLimit", "LocalRelation", "Offset", "OneRowRelation", "Pivot", "Project", "RepartitionByExpression",
    "Sample", "Sort", "SubqueryAlias", "Union", "Unpivot", "UnresolvedHaving", "UnresolvedHint",
    "UnresolvedInlineTable", "UnresolvedRelation", "UnresolvedSubqueryColumnAliases",
    "UnresolvedTableValuedFunction", "UnresolvedTVFAliases", "UnresolvedWith", "WithWindowDefinition",
})
"""Logical plan nodes Spark's parser produces for read-only queries; every other plan node is refused."""


class QueryError(OverlordError):
    """A user error in a query (HTTP 400), with the engine's message and error class."""

    def __init__(self, message: str, error_class: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.error_class = error_class

    def to_druid(self) -> dict[str, Any]:
        """The body Druid returns with a 400 for an invalid query."""
        context = {"errorClass": self.error_class} if self.error_class else {}
        return {"error": "druidException", "errorCode": "invalidInput", "persona": "USER",
                "category": "INVALID_INPUT", "errorMessage": self.message, "context": context}


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
    types_header: Literal[False] = Field(default=False, alias="typesHeader")
    sql_types_header: Literal[False] = Field(default=False, alias="sqlTypesHeader")
    context: dict[str, Any] = {}
    parameters: tuple[SqlParameter, ...] = ()

    def run(self, spark: SparkSession, engine: sa.Engine, max_rows: int = MAX_ROWS
            ) -> list[dict[str, Any]] | list[list[Any]] | str:
        outer = self.context.get("sqlOuterLimit")
        if outer is not None and (not isinstance(outer, int) or isinstance(outer, bool) or outer < 0):
            raise QueryError(f"context.sqlOuterLimit: expected a non-negative integer, got {outer!r}",
                             "INVALID_CONTEXT")
        return run_sql(spark, engine, self.query, self.result_format, self.header,
                       [p.value for p in self.parameters], max_rows, outer)


@dataclass(frozen=True)
class QueryResult:
    """A query's result as an Arrow table (timestamps in UTC)."""

    table: pa.Table

    @property
    def columns(self) -> list[str]:
        return list(self.table.column_names)

    def rows(self) -> list[list[Any]]:
        """Rows as JSON-ready lists: timestamps as ISO-8601 with ``Z`` (milliseconds), as Druid writes them."""
        columns = [[_json_value(v) for v in column.to_pylist()] for column in self.table.columns]
        return [list(row) for row in zip(*columns, strict=True)] if columns else []


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
        for name in _JVM_FUNCTIONS:
            registry.dropFunction(jvm.org.apache.spark.sql.catalyst.FunctionIdentifier(
                name, jvm.scala.Some("builtin"), jvm.scala.Some("system")))
        self._jvm = jvm
        # PySpark logs every captured error with query context at ERROR, stack trace included; a user's
        # bad query is not a server error, and QueryError carries the message.
        logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
        self._parser = self.session._jsparkSession.sessionState().sqlParser()
        self._is_expression: dict[str, bool] = {}
        self.lock = threading.Lock()
        self.frames: dict[str, tuple[tuple[str, ...], DataFrame]] = {}

    def parse(self, query: str) -> Any:
        """The parsed (unresolved) plan as JSON; a syntax error raises :class:`QueryError`."""
        jvm_session = self._jvm.org.apache.spark.sql.SparkSession
        previous = jvm_session.getActiveSession()
        jvm_session.setActiveSession(self.session._jsparkSession)  # the parser reads this session's conf
        try:
            return json.loads(self._parser.parsePlan(query).toJSON())
        except PySparkException as exc:
            raise _user_error(exc) or exc from None
        finally:
            if previous.isDefined():
                jvm_session.setActiveSession(previous.get())
            else:
                jvm_session.clearActiveSession()

    def expression_class(self, name: str) -> bool:
        """Whether the JVM class ``name`` is a Catalyst expression (cached; unknown classes are not)."""
        if name not in self._is_expression:
            lang = self._jvm.java.lang
            try:
                expression = lang.Class.forName("org.apache.spark.sql.catalyst.expressions.Expression")
                self._is_expression[name] = bool(expression.isAssignableFrom(lang.Class.forName(name)))
            except Exception:  # not loadable: treat it as a plan node, i.e. refuse it
                self._is_expression[name] = False
        return self._is_expression[name]


_sessions: WeakKeyDictionary[SparkSession, _QuerySession] = WeakKeyDictionary()
_sessions_lock = threading.Lock()


def _query_session(spark: SparkSession) -> _QuerySession:
    with _sessions_lock:
        if spark not in _sessions:
            _sessions[spark] = _QuerySession(spark)
        return _sessions[spark]


def _nodes(tree: Any) -> list[dict[str, Any]]:
    """Every serialised tree node (plans and expressions, including subqueries and CTEs)."""
    if isinstance(tree, list):
        return [node for item in tree for node in _nodes(item)]
    if isinstance(tree, dict):
        return ([tree] if "class" in tree else []) + [node for value in tree.values() for node in _nodes(value)]
    return []


def _check_read_only(qs: _QuerySession, nodes: list[dict[str, Any]]) -> None:
    for node in nodes:
        full = str(node["class"])
        name = full.rsplit(".", 1)[-1]
        if name == "UnresolvedFunction":
            called = str(node.get("nameParts", "")).strip("[]").rsplit(",", 1)[-1].strip().lower()
            if called in _JVM_FUNCTIONS:
                raise QueryError(f"function {called}() is not allowed: it calls into the JVM", "FUNCTION_NOT_ALLOWED")
        elif name not in _QUERY_OPERATORS and not qs.expression_class(full):
            raise QueryError(f"only read-only queries (SELECT, WITH, VALUES) are allowed; found {name}",
                             "NOT_READ_ONLY")


def _relations(nodes: list[dict[str, Any]]) -> set[str]:
    """Single-part table names the query refers to (datasources, or CTE names)."""
    names = set()
    for node in nodes:
        if str(node["class"]).endswith(".UnresolvedRelation"):
            parts = str(node.get("multipartIdentifier", "")).strip("[]").split(", ")
            if len(parts) == 1 and parts[0]:
                names.add(parts[0])
    return names


def _read(session: SparkSession, paths: tuple[str, ...], storage_options: Mapping[str, Any] | None) -> DataFrame:
    """Spark's Parquet reader for local and HDFS files; the fsspec source for object stores."""
    if all("://" not in p or p.startswith(("file://", "hdfs://")) for p in paths):
        return session.read.parquet(*paths)
    return read_segments(session, paths, storage_options)


def _register_views(qs: _QuerySession, engine: sa.Engine, names: set[str],
                    storage_options: Mapping[str, Any] | None) -> None:
    """Point a view per referenced datasource at exactly its visible files (caller holds the lock)."""
    known = {ds.lower(): ds for ds in datasources(engine)}
    for gone in [ds for ds in qs.frames if ds not in known.values()]:  # no used segments any more
        qs.session.catalog.dropTempView(gone)
        del qs.frames[gone]
    for name in sorted(names):
        datasource = name if name in known.values() else known.get(name.lower())
        if datasource is None:
            continue  # a CTE name, or unknown: Spark reports TABLE_OR_VIEW_NOT_FOUND with the name
        paths = tuple(s.path for s in visible_segments(engine, datasource))
        if not paths:
            raise QueryError(f"datasource {datasource!r} has no published segments", "TABLE_OR_VIEW_NOT_FOUND")
        cached = qs.frames.get(datasource)
        if cached is None or cached[0] != paths:
            try:
                cached = (paths, _read(qs.session, paths, storage_options))
            except PySparkException as exc:
                raise _user_error(exc) or exc from None
            qs.frames[datasource] = cached
        cached[1].createOrReplaceTempView("`" + datasource.replace("`", "``") + "`")


def _user_error(exc: PySparkException) -> QueryError | None:
    """The QueryError for a user's mistake (SQLSTATE classes 22 and 42), None for anything else."""
    state = exc.getSqlState() or ""
    if not isinstance(exc, AnalysisException) and state[:2] not in ("22", "42"):
        return None
    message = str(exc).strip()
    cut = message.find(";\n")  # Spark appends the plan to analysis errors
    return QueryError(message[:cut + 1] if cut >= 0 else message, exc.getCondition())


def execute_sql(spark: SparkSession, engine: sa.Engine, query: str, parameters: Sequence[Any] = (),
                max_rows: int = MAX_ROWS, outer_limit: int | None = None,
                storage_options: Mapping[str, Any] | None = None) -> QueryResult:
    """Run a read-only SQL query over the datasources' visible segments; :class:`QueryError` if invalid.

    ``outer_limit`` keeps the first rows of the result; a result of more than ``max_rows`` rows
    (after that cut) is refused. ``storage_options`` reach fsspec for object-store segments
    (otherwise s3fs takes credentials and endpoint from the environment).
    """
    qs = _query_session(spark)
    nodes = _nodes(qs.parse(query))
    _check_read_only(qs, nodes)
    try:
        with qs.lock:  # views and analysis together: the plan binds the file lists registered here
            _register_views(qs, engine, _relations(nodes), storage_options)
            frame = qs.session.sql(query, args=list(parameters) or None)
        table = frame.limit(max_rows + 1 if outer_limit is None else min(outer_limit, max_rows + 1)).toArrow()
    except PySparkException as exc:
        raise _user_error(exc) or exc from None
    if table.num_rows > max_rows:
        raise QueryError(f"the result has more than {max_rows:,} rows (the overlord's limit, "
                         "OVERLORD_QUERY_MAX_ROWS): aggregate further, add a LIMIT or set context.sqlOuterLimit",
                         "RESULT_TOO_LARGE")
    logger.debug("query returned %d rows: %s", table.num_rows, query)
    return QueryResult(table)


def run_sql(spark: SparkSession, engine: sa.Engine, query: str, result_format: ResultFormat = "object",
            header: bool = False, parameters: Sequence[Any] = (), max_rows: int = MAX_ROWS,
            outer_limit: int | None = None) -> list[dict[str, Any]] | list[list[Any]] | str:
    """Druid's ``POST /druid/v2/sql``: rows as JSON-ready lists/dicts (object, array) or text (csv, *Lines)."""
    if result_format not in CONTENT_TYPES:
        raise QueryError(f"resultFormat must be one of {sorted(CONTENT_TYPES)}, got {result_format!r}",
                         "INVALID_RESULT_FORMAT")
    return format_result(execute_sql(spark, engine, query, parameters, max_rows, outer_limit), result_format, header)


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        value = value.astimezone(UTC) if value.tzinfo else value
        return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
    if isinstance(value, date):
        return value.isoformat()
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


def format_result(result: QueryResult, result_format: ResultFormat, header: bool = False
                  ) -> list[dict[str, Any]] | list[list[Any]] | str:
    """Druid's formats: a list of objects or arrays, or text (one row a line, then a blank line)."""
    columns, rows = result.columns, result.rows()
    if result_format in ("object", "objectLines"):
        objects = [dict(zip(columns, row, strict=True)) for row in rows]
        objects = [dict.fromkeys(columns), *objects] if header else objects
        return objects if result_format == "object" else "".join(json.dumps(o) + "\n" for o in objects) + "\n"
    if result_format in ("array", "arrayLines"):
        arrays = [list(columns), *rows] if header else rows
        return arrays if result_format == "array" else "".join(json.dumps(a) + "\n" for a in arrays) + "\n"
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    if header:
        writer.writerow(columns)
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
