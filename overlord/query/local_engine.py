"""Small queries on DuckDB inside the overlord, answered exactly as Spark would answer them.

A Spark query costs ~0.3 s whatever it reads; DuckDB answers a query over a few pruned files
in milliseconds. A query runs here only when all of these hold, and on Spark otherwise (Spark
stays the reference engine):

1. **It means the same on both.** Its Spark SQL (Druid's functions already translated, its
   parameters bound as literals) is typed against the datasources' columns (sqlglot), and
   uses only the constructs in :data:`SAME_ON_BOTH`, on operands of one kind (text, number,
   time, boolean; a time may meet an ISO-8601 text): where the engines would convert
   implicitly, they convert differently. A ``LIKE`` with a backslash, a division by anything but
   a non-zero integer literal, decimal literals in arithmetic, or an unaliased expression
   column (the engines name those differently) sends it to Spark too.
2. **It reads only what Spark's views would.** DuckDB's own parser (``json_serialize_sql``,
   which accepts one ``SELECT`` and nothing else) must find every table to be one of the
   query's datasource views or a CTE, no table function, and only functions in
   :data:`DUCKDB_FUNCTIONS`. The database can read files under the deep storage root only
   (``allowed_directories``, external access off, configuration locked), so a case missed here
   still reads nothing else and writes nothing.
3. **It fits the overlord.** Its datasources' files, after time pruning, are local (under the
   deep storage root, or copies in the segment cache, :mod:`segment_store.segment_cache`) and total
   at most ``OVERLORD_QUERY_LOCAL_MAX_BYTES``.

A DuckDB error (a user's mistake included) reruns the query on Spark, so a query's error is
always Spark's.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import date, datetime, timedelta
from functools import lru_cache
from typing import Any

import duckdb
import pyarrow as pa
import sqlglot
from sqlglot import TokenType, exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import traverse_scope

from indexing_task.sql_text import quote_identifier, quote_string
from overlord.config import Settings
from overlord.query.segment_source import footer_schema
from overlord.query.time_pruning import QuerySessionSpark
from segment_store.segment_cache import SegmentCache

__all__ = ["DUCKDB_FUNCTIONS", "SAME_ON_BOTH", "LocalEngine"]

logger = logging.getLogger(__name__)

SAME_ON_BOTH: frozenset[type[exp.Expr]] = frozenset({
    exp.Select, exp.From, exp.Join, exp.Where, exp.Group, exp.Having, exp.Order, exp.Ordered, exp.Limit,
    exp.Offset, exp.Subquery, exp.With, exp.CTE, exp.Union, exp.Table, exp.TableAlias, exp.Column, exp.Identifier,
    exp.Star, exp.Alias, exp.Literal, exp.Null, exp.Boolean, exp.Paren, exp.Var, exp.DataType,
    exp.And, exp.Or, exp.Not, exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Is, exp.In, exp.Between,
    exp.Like, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Neg, exp.Case, exp.If, exp.Coalesce, exp.Concat, exp.DPipe,
    exp.Count, exp.Distinct, exp.Sum, exp.Min, exp.Max, exp.Avg, exp.ArgMax, exp.ArgMin,
    exp.TimestampTrunc, exp.Floor, exp.UnixMillis, exp.UnixToTime, exp.Cast, exp.TryCast,
})
"""sqlglot nodes of Spark SQL that DuckDB, as sqlglot renders them, evaluates with Spark's semantics."""

DUCKDB_FUNCTIONS = frozenset({
    "sum", "count", "count_star", "min", "max", "avg", "arg_max_null", "arg_min_null", "date_trunc", "epoch_ms",
    "floor", "nullif", "+", "-", "*", "/", "||", "~~", "!~~",
})
"""Functions (and operators) DuckDB may run, by the names its parser gives them."""

_KINDS = {
    "text": {exp.DataType.Type.VARCHAR, exp.DataType.Type.TEXT, exp.DataType.Type.CHAR},
    "number": {exp.DataType.Type.BIGINT, exp.DataType.Type.INT, exp.DataType.Type.SMALLINT,
               exp.DataType.Type.TINYINT, exp.DataType.Type.DOUBLE, exp.DataType.Type.DECIMAL},
    "time": {exp.DataType.Type.TIMESTAMPTZ, exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPLTZ},
    "boolean": {exp.DataType.Type.BOOLEAN},
}
_ARROW_TYPES = {"string": "VARCHAR", "large_string": "VARCHAR", "int64": "BIGINT", "int32": "INTEGER",
                "double": "DOUBLE", "float": "FLOAT", "bool": "BOOLEAN"} | {
    f"timestamp[{unit}, tz={zone}]": "TIMESTAMP WITH TIME ZONE" for unit in ("ms", "us") for zone in ("UTC", "+00:00")}
"""Arrow types of segment columns as DuckDB reads them."""
_COLUMN_TYPES = {"VARCHAR": "STRING", "BIGINT": "BIGINT", "INTEGER": "INT", "DOUBLE": "DOUBLE", "FLOAT": "FLOAT",
                 "BOOLEAN": "BOOLEAN", "TIMESTAMP WITH TIME ZONE": "TIMESTAMP"}
"""DuckDB's types of segment columns, as Spark names them (a column of another type sends the query to Spark).

FLOAT is no number kind above: Spark compares a FLOAT with a decimal literal as DOUBLEs, DuckDB as FLOATs.
"""
_TRUNCATION_UNITS = frozenset({"YEAR", "QUARTER", "MONTH", "WEEK", "DAY", "HOUR", "MINUTE", "SECOND"})
"""``date_trunc`` units that both engines read alike (Spark answers NULL for one it does not know)."""

_ISO_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\d([ T]\d\d:\d\d(:\d\d(\.\d{1,6})?)?)?(Z|[+-]\d\d:\d\d)?")
"""Timestamp texts both engines read as the same instant."""


class LocalEngine:
    """One in-memory DuckDB database that may read the files under ``root`` and nothing else."""

    def __init__(self, root: str, max_bytes: int, memory_limit: str = "2GB", cache: SegmentCache | None = None) -> None:
        self.max_bytes = max_bytes
        self.cache = cache
        """Copies of object-store segments: queries read them here (and Spark reads them where it can)."""
        self.roots = tuple([os.path.abspath(root)] if "://" not in root else []) + (
            (cache.directory,) if cache is not None else ())
        """The directories whose files DuckDB may read."""
        self._db = duckdb.connect(config={"autoinstall_known_extensions": False,
                                          "autoload_known_extensions": False})
        self._catalog = {str(name) for (name,) in self._db.execute(
            "SELECT lower(view_name) FROM duckdb_views() UNION SELECT lower(table_name) FROM duckdb_tables()"
        ).fetchall()}  # system views a name could reach where no CTE of that name is in scope
        for statement in ("SET TimeZone = 'UTC'", "SET parquet_metadata_cache = true",
                          "SET python_enable_replacements = false", "SET temp_directory = ''",
                          f"SET memory_limit = {quote_string(memory_limit)}",
                          f"SET allowed_directories = [{', '.join(map(quote_string, self.roots or ['/nonexistent']))}]",
                          "SET enable_external_access = false", "SET lock_configuration = true"):
            self._db.execute(statement)

    @classmethod
    def from_settings(cls, settings: Settings) -> LocalEngine:
        directory, cache = settings.segment_cache, None
        try:
            cache = SegmentCache(directory, settings.segment_cache_max_bytes) if directory is not None else None
        except OSError as exc:  # queries go on without it, reading the object store
            logger.error("no segment cache: %s (OVERLORD_SEGMENT_CACHE_DIR)", exc)
        return cls(settings.deep_storage, settings.query_local_max_bytes, settings.query_local_memory_limit, cache)

    def references(self, spark_sql: str) -> Counter[str] | None:
        """How often the query names each table that is not one of its CTEs; None if it is not for DuckDB."""
        if self.max_bytes == 0 or not self.roots:
            return None
        names = _references(spark_sql)
        return None if names is None else Counter(names)

    def fits(self, paths: Sequence[str], size_bytes: int) -> bool:
        """Whether files of ``size_bytes`` in total are small enough, and local files under the roots."""
        return size_bytes <= self.max_bytes and all(
            any(_local(p).startswith(root + os.sep) for root in self.roots) for p in paths)

    def plan(self, spark_sql: str, schemas: Mapping[str, Mapping[str, str]], parameters: Sequence[Any]) -> str | None:
        """The DuckDB SQL for a query's Spark SQL, or None if DuckDB might answer differently.

        ``schemas``: each table's columns and Spark types; ``parameters`` are bound as literals.
        """
        key = (spark_sql, tuple((name, tuple(columns.items())) for name, columns in schemas.items()),
               tuple(parameters))
        try:
            hash(key)
        except TypeError:  # a list or object parameter: Spark's literal of it is not DuckDB's
            return None
        return _plan(*key)

    def tables(self, sql: str) -> set[str] | None:
        """The tables (lower case) ``sql`` reads that are not its CTEs, by DuckDB's parser.

        None if the query might do more than read those tables.
        """
        with self._db.cursor() as cursor:
            parsed = json.loads(cursor.execute("SELECT json_serialize_sql(?)", [sql]).fetchall()[0][0])
        if parsed.get("error") or len(parsed["statements"]) != 1:
            return None
        tables: set[str] = set()
        ctes: set[str] = set()
        for node in _dicts(parsed["statements"][0]):
            kind = node.get("type")
            if kind in ("TABLE_FUNCTION", "SHOW_REF", "RECURSIVE_CTE_NODE", "COLUMN_DATA_REF"):
                return None
            if node.get("class") == "FUNCTION" and (node["function_name"] not in DUCKDB_FUNCTIONS
                                                    or node.get("schema") or node.get("catalog")):
                return None
            if kind == "BASE_TABLE":
                if node.get("schema_name") or node.get("catalog_name"):
                    return None
                tables.add(node["table_name"].lower())
            ctes.update(entry["key"].lower() for entry in node.get("cte_map", {}).get("map", []))
        if any("." in name or name in self._catalog for name in ctes):  # named out of its scope, DuckDB would
            return None  # read it as a file or a system view
        return tables - ctes

    def run(self, sql: str, views: Mapping[str, tuple[Sequence[str], Sequence[str]]], max_rows: int,
            on_cursor: Callable[[duckdb.DuckDBPyConnection], None]) -> pa.Table:
        """Run ``sql`` over views (name -> (all visible paths, paths to read)); at most ``max_rows`` rows.

        ``on_cursor`` receives the cursor before the query runs (to interrupt it).
        """
        with self._db.cursor() as cursor:
            for name, (every, kept) in views.items():
                cursor.execute(f"CREATE TEMP VIEW {quote_identifier(name)} AS {self._source(every, kept)}")
            on_cursor(cursor)
            relation = cursor.sql(sql)
            types = [str(kind) for kind in relation.types]
            reader: pa.RecordBatchReader = relation.to_arrow_reader(min(max_rows, 65_536))
            batches, rows = [], 0
            for batch in reader:
                batches.append(batch)
                rows += batch.num_rows
                if rows >= max_rows:
                    break
            table = pa.Table.from_batches(batches, reader.schema).slice(0, max_rows)
        return _spark_types(table, types)

    def schema(self, paths: Sequence[str]) -> tuple[tuple[str, str], ...] | None:
        """The columns of ``paths`` together (name, DuckDB type), first seen first; None if their types differ."""
        return self._schema(tuple(paths))

    @lru_cache(maxsize=256)  # noqa: B019 (the engine lives as long as the process)
    def _schema(self, paths: tuple[str, ...]) -> tuple[tuple[str, str], ...] | None:
        columns: dict[str, str] = {}
        for path in paths:
            for name, kind in self._columns(path):
                if columns.setdefault(name, kind) != kind:
                    return None
        return tuple(columns.items())

    def spark_schema(self, paths: Sequence[str]) -> dict[str, str] | None:
        """The columns of ``paths`` with their Spark types; None if one has a type not in ``_COLUMN_TYPES``."""
        columns = self.schema(paths)
        if columns is None or not all(kind in _COLUMN_TYPES for _, kind in columns):
            return None
        return {name: _COLUMN_TYPES[kind] for name, kind in columns}

    @staticmethod
    def _columns(path: str) -> tuple[tuple[str, str], ...]:
        """One file's columns (name, DuckDB type), from its footer."""
        return tuple((f.name, _ARROW_TYPES.get(str(f.type), str(f.type)))
                     for f in footer_schema(_local(path) or path))  # an object store's: read once, remembered

    def _source(self, every: Sequence[str], kept: Sequence[str]) -> str:
        """A SELECT over the files ``kept`` with the columns of ``every`` (nulls where a kept file lacks one)."""
        full = self.schema(every)
        assert full is not None  # checked by spark_schema
        same_columns = len({self._columns(path) for path in kept}) <= 1
        read = f"read_parquet({_paths(kept)}{'' if same_columns else ', union_by_name = true'})"
        if kept and self.schema(kept) == full:
            return f"SELECT * FROM {read}"
        empty = ", ".join(f"CAST(NULL AS {kind}) AS {quote_identifier(name)}" for name, kind in full)
        return f"SELECT {empty} WHERE false" + (f" UNION ALL BY NAME SELECT * FROM {read}" if kept else "")


@lru_cache(maxsize=1024)
def _references(spark_sql: str) -> tuple[str, ...] | None:
    """The table names of ``spark_sql`` that are not its CTEs, once per reference; None if some has a schema."""
    tree = _parse(spark_sql)
    if tree is None:
        return None
    try:  # a name is a table where no CTE of that name is in scope
        tables = [source for scope in traverse_scope(tree) for source in scope.sources.values()
                  if isinstance(source, exp.Table)]
    except SqlglotError:
        return None
    if any(table.args.get("db") or table.args.get("catalog") for table in tables):
        return None
    return tuple(table.name for table in tables)


@lru_cache(maxsize=1024)
def _plan(spark_sql: str, schemas: tuple[tuple[str, tuple[tuple[str, str], ...]], ...],
          parameters: tuple[Any, ...]) -> str | None:
    """:meth:`LocalEngine.plan`, for hashable arguments (a dashboard repeats its queries)."""
    bound = _bind(spark_sql, parameters)
    tree = None if bound is None or not _truncation_units_are_sparks(bound) else _parse(bound)
    if tree is None:
        return None
    for call in list(tree.find_all(exp.Anonymous)):  # Druid's MILLIS_TO_TIMESTAMP
        if call.name.lower() == "timestamp_millis" and len(call.expressions) == 1:
            call.replace(exp.UnixToTime(this=call.expressions[0], scale=exp.UnixToTime.MILLIS))
    schema: dict[str, object] = {name: dict(columns) for name, columns in schemas}
    try:
        typed = annotate_types(qualify(tree.copy(), schema=schema, dialect="spark"), schema=schema, dialect="spark")
    except Exception:  # sqlglot could not type it (unknown column, ...): Spark answers, or explains
        return None
    if not all(_same_on_both(node) for node in typed.walk()):
        return None
    columns = {name.lower() for _, table in schemas for name, _ in table}
    if any(_names_differ(select, columns) for select in tree.find_all(exp.Select)):
        return None
    if any(star.args.get("replace") or star.args.get("rename") for star in tree.find_all(exp.Star)):
        return None  # not Spark's syntax (qualifying expands the star, so this looks at the query as written)
    for select in tree.find_all(exp.Select):
        if not _names_the_result(select):
            continue
        if not all(isinstance(c, exp.Alias | exp.Column | exp.Star) for c in select.expressions):
            return None
        for column in select.expressions:  # Spark names the column as written, DuckDB as its table does
            if isinstance(column, exp.Column) and not isinstance(column.this, exp.Star):
                column.replace(exp.alias_(column.copy(), exp.to_identifier(column.name, quoted=True)))
    for floor in list(tree.find_all(exp.Floor)):  # Spark's FLOOR is a BIGINT, DuckDB's keeps its input's type
        floor.replace(exp.cast(floor.copy(), exp.DataType.Type.BIGINT))
    for by in list(tree.find_all(exp.ArgMax, exp.ArgMin)):  # Spark's MAX_BY keeps a NULL value, DuckDB's ARG_MAX not
        name = "arg_max_null" if isinstance(by, exp.ArgMax) else "arg_min_null"
        by.replace(exp.Anonymous(this=name, expressions=[by.this.copy(), by.expression.copy()]))
    return tree.sql(dialect="duckdb")


def _names_differ(select: exp.Select, columns: set[str]) -> bool:
    """Whether a name in ``select`` means an alias to one engine and a column (or nothing) to the other.

    WHERE may name an alias in DuckDB, not in Spark; in ORDER BY (within an expression) and HAVING,
    Spark reads a name that is an alias and a column as the alias, DuckDB as the column.
    """
    aliases = {a.alias.lower(): a.this for a in select.expressions if isinstance(a, exp.Alias)}
    shadowing = {name for name, value in aliases.items() if name in columns
                 and not (isinstance(value, exp.Column) and value.name.lower() == name)}
    where = select.args.get("where")
    if where is not None and any(not c.table and c.name.lower() in aliases.keys() - columns
                                 for c in where.find_all(exp.Column)):
        return True
    clauses = [c for c in (select.args.get("order"), select.args.get("having")) if c is not None]
    return any(not column.table and column.name.lower() in shadowing
               and not (isinstance(clause, exp.Order) and isinstance(column.parent, exp.Ordered))
               for clause in clauses for column in clause.find_all(exp.Column))


def _truncation_units_are_sparks(spark_sql: str) -> bool:
    """Whether every ``date_trunc`` takes its unit as a text Spark knows (sqlglot normalizes units, so the tokens)."""
    tokens = QuerySessionSpark().tokenize(spark_sql)
    for i, token in enumerate(tokens[:-2]):
        if token.token_type == TokenType.VAR and token.text.upper() == "DATE_TRUNC" \
                and tokens[i + 1].token_type == TokenType.L_PAREN:
            unit = tokens[i + 2]
            if unit.token_type != TokenType.STRING or unit.text.upper() not in _TRUNCATION_UNITS:
                return False
    return True


def _parse(spark_sql: str) -> exp.Expr | None:
    try:
        return sqlglot.parse_one(spark_sql, read=QuerySessionSpark)
    except (SqlglotError, IndexError):  # sqlglot's parser raises IndexError on some calls (``map(1, 2, 3)``)
        return None  # Spark answers, or explains what is wrong


def _bind(spark_sql: str, parameters: Sequence[Any]) -> str | None:
    """The query with its ``?`` placeholders replaced by literals of the parameters, as Spark binds them."""
    try:
        tokens = QuerySessionSpark().tokenize(spark_sql)
    except SqlglotError:
        return None
    places = [t for t in tokens if t.token_type == TokenType.PLACEHOLDER]
    if len(places) != len(parameters):
        return None
    pieces, done = [], 0
    for token, value in zip(places, parameters, strict=True):
        literal = _literal(value)
        if literal is None:
            return None
        pieces += [spark_sql[done:token.start], literal.sql(dialect=QuerySessionSpark)]
        done = token.end + 1
    return "".join(pieces) + spark_sql[done:]


def _literal(value: Any) -> exp.Expr | None:
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, int):
        return exp.Literal.number(value)
    if isinstance(value, str):
        return exp.Literal.string(value)
    if isinstance(value, datetime | date):
        return exp.cast(exp.Literal.string(value.isoformat()), exp.DataType.Type.TIMESTAMPTZ)
    return None  # floats and the rest: Spark's literal types differ from DuckDB's


def _kind(node: exp.Expr) -> str | None:
    kind = node.type.this if node.type is not None else None
    return next((name for name, types in _KINDS.items() if kind in types), None)


def _iso_text(node: exp.Expr) -> bool:
    """An ISO-8601 text both engines read as the same instant (Spark refuses hour 24 and offsets past 18:00)."""
    if not (isinstance(node, exp.Literal) and node.is_string and _ISO_TIMESTAMP.fullmatch(node.this)):
        return False
    try:
        offset = datetime.fromisoformat(node.this).utcoffset()
    except ValueError:
        return False
    return offset is None or abs(offset) <= timedelta(hours=18)


def _one_kind(operands: Sequence[exp.Expr], kinds: frozenset[str] | None = None) -> bool:
    """Operands all of one kind (of ``kinds``), NULLs aside; a time may meet an ISO-8601 text."""
    present = [o for o in operands if not isinstance(o, exp.Null)]
    found = {_kind(o) for o in present}
    if found == {"time", "text"}:
        return all(_kind(o) == "time" or _iso_text(o) for o in present)
    return len(found) <= 1 and None not in found and (kinds is None or found <= kinds)


_NUMBER = frozenset({"number"})
_TEXT = frozenset({"text"})


_BOOLEAN = frozenset({"boolean"})


def _same_on_both(node: exp.Expr) -> bool:
    if type(node) not in SAME_ON_BOTH:
        return False
    if isinstance(node, exp.Where | exp.Having | exp.Not):  # Spark takes no number for a condition
        return _one_kind([node.this], _BOOLEAN)
    if isinstance(node, exp.And | exp.Or):
        return _one_kind([node.this, node.expression], _BOOLEAN)
    if isinstance(node, exp.Union):  # Spark fails on branches of different kinds where DuckDB converts
        left, right = node.this.selects, node.expression.selects
        return (type(node) is exp.Union and not node.args.get("by_name") and len(left) == len(right)
                and all(_one_kind([a, b]) for a, b in zip(left, right, strict=True)))
    if isinstance(node, exp.TimestampTrunc):
        return _one_kind([node.this], frozenset({"time"}))
    if isinstance(node, exp.Floor):
        return not any(value for key, value in node.args.items() if key != "this") and _one_kind([node.this], _NUMBER)
    if isinstance(node, exp.Div):  # Spark (ANSI) fails on a zero divisor where DuckDB answers NULL
        divisor = node.expression
        return (isinstance(divisor, exp.Literal) and divisor.is_int and int(divisor.this) != 0
                and _one_kind([node.this], _NUMBER))
    if isinstance(node, exp.Add | exp.Sub | exp.Mul):
        return _one_kind([node.this, node.expression], _NUMBER)
    if isinstance(node, exp.Neg | exp.Sum | exp.Avg):
        return _one_kind([node.this], _NUMBER)
    if isinstance(node, exp.Literal) and not node.is_string:
        if node.is_int:  # past BIGINT, Spark's literal is a DECIMAL
            return -2**63 <= int(node.this) < 2**63
        # Spark's DECIMAL arithmetic types its results otherwise than DuckDB's; past a DOUBLE, Spark fails
        return isinstance(node.parent, exp.Predicate) and math.isfinite(float(node.this))
    if isinstance(node, exp.EQ | exp.NEQ | exp.GT | exp.GTE | exp.LT | exp.LTE):
        return _one_kind([node.this, node.expression])
    if isinstance(node, exp.In):
        query = node.args.get("query")
        return _one_kind([node.this, *(query.unnest().selects[:1] if query else node.expressions)])
    if isinstance(node, exp.Between):
        return not node.args.get("symmetric") and _one_kind([node.this, node.args["low"], node.args["high"]])
    if isinstance(node, exp.Like):  # Spark's default escape is a backslash, DuckDB has none
        pattern = node.expression
        return (node.args.get("escape") is None and isinstance(pattern, exp.Literal) and "\\" not in pattern.this
                and _one_kind([node.this], _TEXT))
    if isinstance(node, exp.Concat | exp.DPipe):
        return _one_kind(node.expressions if isinstance(node, exp.Concat) else [node.this, node.expression], _TEXT)
    if isinstance(node, exp.Coalesce):
        return _one_kind([node.this, *node.expressions])
    if isinstance(node, exp.Case):
        return _one_kind([*(i.args["true"] for i in node.args["ifs"]), node.args.get("default") or exp.Null()])
    if isinstance(node, exp.If):
        return _one_kind([node.this], _BOOLEAN) and _one_kind([node.args["true"], node.args.get("false") or exp.Null()])
    if isinstance(node, exp.Cast):  # exp.TryCast is a subclass; a timestamp, or an ISO text as one
        return node.to.this == exp.DataType.Type.TIMESTAMPTZ and (_kind(node.this) == "time" or _iso_text(node.this))
    if isinstance(node, exp.Join):
        condition = node.args.get("on")
        return (node.kind in ("", "INNER") and node.side in ("", "LEFT") and condition is not None
                and _one_kind([condition], _BOOLEAN))
    if isinstance(node, exp.Union):
        return type(node) is exp.Union
    return True


def _names_the_result(select: exp.Select) -> bool:
    """Whether the columns of ``select`` may name the result's (not those of a later UNION branch)."""
    node: exp.Expr = select
    while node.parent is not None:
        if isinstance(node.parent, exp.Union) and node is node.parent.expression:
            return False
        node = node.parent
    return True


def _dicts(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, dict):
        yield value
        for item in value.values():
            yield from _dicts(item)
    elif isinstance(value, list):
        for item in value:
            yield from _dicts(item)


@lru_cache(maxsize=1_000_000)
def _local(path: str) -> str:
    if "://" in path and not path.startswith("file://"):
        return ""
    return os.path.abspath(path.removeprefix("file://"))


def _paths(paths: Sequence[str]) -> str:
    return "[" + ", ".join(quote_string(_local(p)) for p in paths) + "]"


def _spark_types(table: pa.Table, duckdb_types: list[str]) -> pa.Table:
    """DuckDB's HUGEINT sums as Spark's BIGINT (an overflow raises, and the query goes to Spark)."""
    for i, kind in enumerate(duckdb_types):
        if kind == "HUGEINT":
            table = table.set_column(i, table.field(i).name, table.column(i).cast(pa.int64()))
    return table
