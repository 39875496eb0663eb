"""Druid SQL on Spark: Druid's functions and schemas rewritten into Spark SQL before it is parsed.

The rewriting works on sqlglot's syntax tree, never on the text. sqlglot parses Druid SQL
(``"name"`` identifiers, ``'text'`` strings) but passes Druid's own functions through
untouched, so each is translated here with Druid's semantics: ``TIME_FLOOR`` with Druid's
period alignment (one unit truncates, a multiple counts whole periods from the epoch),
``REGEXP_EXTRACT``'s default group 0, ``LATEST``/``EARLIEST`` by ``__time``, and so on. A query
with nothing Druid-specific is passed on as written, so Spark SQL keeps working; one that
sqlglot cannot parse is passed on too, and Spark reports the syntax error. The sandbox checks
the translated query's plans like any other: translation cannot widen what a query may do.

Tables: ``druid.x`` is the datasource ``x``; ``INFORMATION_SCHEMA.*`` and ``sys.*`` tables are
views the engine builds from the metadata store (:mod:`overlord.query.metadata_tables`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import build_date_delta
from sqlglot.dialects.druid import Druid
from sqlglot.errors import SqlglotError
from sqlglot.parsers.druid import DruidParser
from sqlglot.tokens import Tokenizer

from overlord.query.constants import check_constants
from overlord.query.function_bounds import ALLOWED_FUNCTIONS
from overlord.query.metadata_tables import SCHEMAS
from overlord.query.multi_value import MV_FUNCTIONS, has_mv_results, is_mv, rewrite_multi_value
from overlord.query.query_errors import QueryError
from overlord.query.sketch_sql import SKETCH_OBJECT_FUNCTIONS, sketch_argument
from specs.sketch_aggregators import Sketch

__all__ = ["FUNCTIONS", "METADATA_TABLES", "MILLIS", "UTC_NAMES", "Translation", "metadata_view", "parse_period",
           "translate"]

METADATA_TABLES = frozenset(SCHEMAS)
"""``schema.table`` names (lower case) of the metadata tables."""

_PERIOD = re.compile(r"P(?:(\d+)([YMWD])|T(\d+)([HMS]))", re.IGNORECASE)
_DATE_UNITS = {"Y": "YEAR", "M": "MONTH", "W": "WEEK", "D": "DAY"}
_TIME_UNITS = {"H": "HOUR", "M": "MINUTE", "S": "SECOND"}
MILLIS = {"WEEK": 604_800_000, "DAY": 86_400_000, "HOUR": 3_600_000, "MINUTE": 60_000, "SECOND": 1_000}
_FLOOR_UNITS = frozenset({"SECOND", "MINUTE", "HOUR", "DAY", "WEEK", "MONTH", "QUARTER", "YEAR"})
_EXTRACT = {"EPOCH": "unix_seconds(_t)", "SECOND": "second(_t)", "MINUTE": "minute(_t)", "HOUR": "hour(_t)",
            "DAY": "dayofmonth(_t)", "DOW": "extract(DAYOFWEEK_ISO FROM _t)",
            "ISODOW": "extract(DAYOFWEEK_ISO FROM _t)",
            "DOY": "dayofyear(_t)", "WEEK": "weekofyear(_t)", "MONTH": "month(_t)", "QUARTER": "quarter(_t)",
            "YEAR": "year(_t)"}
_ISO_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"
UTC_NAMES = frozenset({"UTC", "ETC/UTC", "Z", "GMT", "+00:00"})
"""Time zone names (upper case) accepted: every timestamp here is UTC."""


class _DruidParser(DruidParser):
    # Druid's TIMESTAMPADD/DIFF take the unit first; sqlglot's Druid parser reads it as a column.
    FUNCTIONS = {**DruidParser.FUNCTIONS, "TIMESTAMPDIFF": build_date_delta(exp.TimestampDiff),
                 "TIMESTAMPADD": build_date_delta(exp.TimestampAdd),
                 "ANY_VALUE": lambda args: exp.Anonymous(this="ANY_VALUE", expressions=args)}  # and maxBytes


class _DruidTokenizer(Tokenizer):
    UNICODE_STRINGS = [("U&'", "'"), ("u&'", "'")]  # U&'\\05E8': Calcite's Unicode string literals


class _DruidDialect(Druid):
    Parser = _DruidParser
    Tokenizer = _DruidTokenizer


@dataclass(frozen=True)
class Translation:
    """The Spark SQL to run, and the metadata tables it reads (``schema.table``, lower case)."""

    sql: str
    metadata_tables: frozenset[str] = frozenset()
    table_names: frozenset[str] = frozenset()
    """Every table name the query names (lower case), CTEs' included."""
    columns: frozenset[str] = frozenset()
    """Every column name the query names (lower case): if any is multi-value, the query is translated again
    knowing it (``translate``'s ``complex_columns``)."""
    typed_columns: frozenset[str] = frozenset()
    """Columns (lower case) compared with a number, summed, or a top-N's: the query is translated again
    knowing which are text or numbers (``translate``'s ``complex_columns``: ``string``, ``float``, ...)."""
    complex_arguments: frozenset[str] = frozenset()
    """Columns (lower case) given to a function that reads sketch or first/last columns differently: if
    they are such columns, the query is translated again knowing their kind (``translate``'s ``complex_columns``)."""


def metadata_view(table: str) -> str:
    """The name of the view that serves metadata table ``table`` (``schema.table``)."""
    return "__druid_" + table.replace(".", "_")


@lru_cache(maxsize=1024)
def translate(query: str, complex_columns: tuple[tuple[str, str], ...] = ()) -> Translation:
    """Druid SQL to Spark SQL; :class:`QueryError` names a Druid construct that is not supported.

    ``complex_columns`` are the sketch, first/last and multi-value columns of the tables queried:
    (lower-case name, kind as segment descriptors record it: a ``Sketch`` as text, ``pair:<type>``
    or ``multi_value``).
    """
    try:
        trees = sqlglot.parse(query, read=_DruidDialect)
    except SqlglotError:
        return Translation(query)  # Spark's parser reports the syntax error
    if len(trees) != 1 or trees[0] is None:
        return Translation(query)
    tree, tables = trees[0], set[str]()
    changed = check_constants(tree)
    names = {table.name.lower() for table in tree.find_all(exp.Table)}
    arguments = {column.name.lower() for node in tree.walk() if (column := _complex_argument(node)) is not None}
    columns = frozenset(column.name.lower() for column in tree.find_all(exp.Column))
    typed = frozenset(column.name.lower() for node in tree.walk() for column in _typed_operands(node)) | {
        column.name.lower() for select in tree.find_all(exp.Select) if (column := _top_n_column(select, query))}
    kinds = dict(complex_columns)
    multi_value = frozenset(name for name, kind in kinds.items() if kind == "multi_value")
    if multi_value or has_mv_results(tree):
        tree, changed = rewrite_multi_value(tree, multi_value), True
    for node in reversed(list(tree.walk(bfs=False))):  # children first: nested Druid calls are rewritten too
        new = _rewrite(node, tables, kinds, multi_value, query)
        if new is not node:
            changed = True
            if node is tree:
                tree = new
            else:
                node.replace(new)
    return Translation(tree.sql(dialect="spark") if changed else query, frozenset(tables), frozenset(names),
                       columns, typed, frozenset(arguments))


def _refuse_split_subtotals(select: exp.Select) -> None:
    """Refuse the shape Druid answers with split subtotals (a 400 rather than a different answer).

    Grouping sets ordered by grouping columns, not first the first one, with a LIMIT: Druid sorts
    the rows by the ORDER BY before it merges the subtotal of a leading grouping column, and
    gives that subtotal once per value of the ordering column.
    """
    group, order = select.args.get("group"), select.args.get("order")
    sets = [key for key in (group.expressions if group else []) if isinstance(key, exp.GroupingSets | exp.Rollup
                                                                                 | exp.Cube)]
    if not sets or order is None or select.args.get("limit") is None:
        return
    grouped = [column.name.lower() for key in sets for column in key.find_all(exp.Column)]
    keys = []
    for ordered in order.expressions:
        key = ordered.this
        if isinstance(key, exp.Literal) and key.is_int and 0 < int(key.this) <= len(select.expressions):
            key = select.expressions[int(key.this) - 1].unalias()
        if not (isinstance(key, exp.Column) and key.name.lower() in grouped):
            return  # ordered by an aggregate or an expression: Druid orders after the subtotals
        keys.append(key.name.lower())
    if keys[0] != grouped[0]:
        raise QueryError(f"GROUPING SETS ordered by {keys[0]} with a LIMIT: Druid answers this shape with the "
                         f"subtotals of {grouped[0]} split by {keys[0]}; refused rather than answer differently "
                         f"(order by {grouped[0]} first, or drop the LIMIT)", "UNSUPPORTED_DRUID_SQL")


def _rewrite(node: exp.Expr, tables: set[str], complex_columns: dict[str, str],
             multi_value: frozenset[str], query: str) -> exp.Expr:
    if isinstance(node, exp.Table) and node.args.get("db") is not None:
        return _table(node, tables)
    column = _complex_argument(node)
    kind = None if column is None else complex_columns.get(column.name.lower())
    if column is not None and kind not in (None, *_PLAIN_KINDS):  # multi-value: see rewrite_multi_value
        return _over_complex(node, column, kind)
    if _typed_operands(node):
        return _typed(node, complex_columns)
    if isinstance(node, exp.Select) and (top := _top_n_column(node, query)) is not None and complex_columns.get(
            top.name.lower()) in ("long", "float", "double"):
        nulls_first = node.copy()  # Druid's top-N of a number column, descending, puts its nulls first
        nulls_first.args["order"].expressions[0].set("nulls_first", True)
        return nulls_first
    if isinstance(node, exp.Filter | exp.Window) and _is_estimate(node.this):  # FILTER/OVER: of the aggregate
        estimate: exp.Expr = node.this.copy()
        wrapped = node.copy()
        wrapped.set("this", estimate.expressions[0])
        estimate.expressions[0] = wrapped
        return estimate
    if isinstance(node, exp.UnicodeString):
        return exp.Literal.string(_unicode(node.this))
    if isinstance(node, exp.Array):  # Druid's ARRAY[...] is Spark's array(...)
        return node.copy()
    if isinstance(node, exp.Column) and not node.table and not node.this.quoted and node.name.upper() == "PI":
        return exp.Anonymous(this="pi")  # Calcite's PI takes no parentheses
    if isinstance(node, exp.Is) and isinstance(node.this, exp.Predicate):  # Spark: (a IN (...)) IS TRUE
        return exp.Is(this=exp.Paren(this=node.this.copy()), expression=node.expression.copy())
    if isinstance(node, exp.Select) and (group := node.args.get("group")) is not None and all(
            isinstance(key, exp.Tuple) and not key.expressions for key in group.expressions) and not any(
            group.args.get(part) for part in ("grouping_sets", "cube", "rollup")):
        without = node.copy()  # GROUP BY (): one group of every row, as an aggregate without GROUP BY
        without.set("group", None)
        return without
    if isinstance(node, exp.Select):
        _refuse_split_subtotals(node)
    if isinstance(node, exp.Grouping) and len(node.expressions) > 1:  # one bit per argument, the first highest
        bits: list[exp.Expr] = [exp.Mul(this=exp.Anonymous(this="grouping", expressions=[e.copy()]),
                                        expression=exp.Literal.number(2 ** i))
                                for i, e in enumerate(reversed(node.expressions))]
        return exp.Paren(this=functools.reduce(lambda a, b: exp.Add(this=b, expression=a), bits))
    if isinstance(node, exp.Extract) and node.name.upper() == "EPOCH":
        return _sql("unix_seconds(CAST(_t AS TIMESTAMP))", _t=node.expression)
    if isinstance(node, exp.Escape) and isinstance(node.this, exp.Like | exp.ILike):
        return _like_escape(node)
    if (isinstance(node, exp.Window) and isinstance(node.this, _ROW_ORDER_FUNCTIONS) and node.args.get("over")
            and not node.args.get("order") and not node.args.get("alias")):
        raise QueryError(f"{node.this.sql_name()} over a window without ORDER BY: Druid takes the rows in its scan "
                         "order, which is not kept here; add ORDER BY to the window", "UNSUPPORTED_DRUID_SQL")
    if isinstance(node, exp.WindowSpec) and node.args.get("start_side") == "FOLLOWING" and not node.args.get("end"):
        frame = node.copy()  # Calcite: ROWS n FOLLOWING is BETWEEN CURRENT ROW AND n FOLLOWING
        frame.set("end", frame.args["start"])
        frame.set("end_side", "FOLLOWING")
        frame.set("start", "CURRENT ROW")
        frame.set("start_side", None)
        return frame
    if isinstance(node, exp.SafeDivide):  # x / 0 is NULL, 0 / 0 is 0
        return _sql("CASE WHEN _b <> 0 THEN _q WHEN _a = 0 THEN 0 END", _a=node.this, _b=node.expression,
                    _q=_divide(node.this, node.expression))
    if type(node) is exp.Div and _integral(node.this) and _integral(node.expression):
        return _divide(node.this, node.expression)
    if isinstance(node, exp.ArrayConcatAgg):
        raise QueryError("ARRAY_CONCAT_AGG is a Druid function this overlord does not support",
                         "UNSUPPORTED_DRUID_SQL")
    if isinstance(node, exp.Anonymous):
        name = str(node.this).upper()
        if name in _UNSUPPORTED or name.startswith(_UNSUPPORTED_PREFIXES):
            raise QueryError(f"{name} is a Druid function this overlord does not support", "UNSUPPORTED_DRUID_SQL")
        if name in _DRUID_DEFECTS:
            raise QueryError(_DRUID_DEFECTS[name], "UNSUPPORTED_DRUID_SQL")
        if name in SKETCH_OBJECT_FUNCTIONS:
            return SKETCH_OBJECT_FUNCTIONS[name](node, list(node.expressions))
        if name in MV_FUNCTIONS:
            return MV_FUNCTIONS[name](list(node.expressions), multi_value)
        if name == "ANY_VALUE":
            return _any_value(node)
        translator = _FUNCTIONS.get(name)
        return translator(list(node.expressions)) if translator else node
    if isinstance(node, exp.Unnest) and any(is_mv(e, multi_value) for e in node.expressions):
        unnested = node.copy()  # as in Druid, a multi-value row with no values unnests to one null row
        unnested.set("expressions", [_sql("IF(_v IS NULL OR size(_v) = 0, array(CAST(NULL AS STRING)), _v)", _v=e)
                                     if is_mv(e, multi_value) else e.copy() for e in node.expressions])
        return unnested
    if isinstance(node, exp.ArrayContains):  # Druid's second argument may be an array: all of its elements
        return MV_FUNCTIONS["MV_CONTAINS"]([node.this, node.expression], multi_value)
    if isinstance(node, exp.DateTrunc) and _written_unit(node.args.get("unit"), query):
        return _trunc(node.this, node.args["unit"].name.upper())  # sqlglot writes Spark's date-only TRUNC
    if isinstance(node, exp.StringToArray):  # the delimiter is a regular expression
        return exp.Anonymous(this="split", expressions=[node.this.copy(), node.expression.copy()])
    if isinstance(node, exp.ArrayAppend | exp.ArrayPrepend):  # as written: ARRAY_PREPEND(value, array)
        name = "MV_APPEND" if isinstance(node, exp.ArrayAppend) else "MV_PREPEND"
        return MV_FUNCTIONS[name]([node.this, node.expression], multi_value)
    if isinstance(node, exp.ArraySlice):
        bounds = [node.args[b] for b in ("start", "end") if node.args.get(b) is not None]
        return MV_FUNCTIONS["ARRAY_SLICE"]([node.this, *bounds], multi_value)
    if isinstance(node, exp.ArrayToString):  # Druid writes a null element as null
        return exp.Anonymous(this="array_join", expressions=[node.this.copy(), node.expression.copy(),
                                                             exp.Literal.string("null")])
    if isinstance(node, exp.Floor | exp.Ceil) and node.args.get("to") is not None:
        unit = node.args["to"].name.upper()
        if unit not in _FLOOR_UNITS:
            raise QueryError(f"{type(node).__name__.upper()}(... TO {unit}): unsupported unit; use one of "
                             f"{', '.join(sorted(_FLOOR_UNITS))}", "UNSUPPORTED_DRUID_SQL")
        floor = _trunc(node.this, unit)
        return floor if isinstance(node, exp.Floor) else _ceil(node.this, floor, unit, 1)
    if isinstance(node, exp.RegexpExtract):  # Druid's third argument is the group, by default 0 (Spark's: 1)
        group = node.args.get("group") or node.args.get("position") or exp.Literal.number(0)
        return _sql("nullif(regexp_extract(_s, _p, _g), '')", _s=node.this, _p=node.expression, _g=group)  # no match
    if type(node) is exp.Cast:  # Druid's CAST gives NULL for what it cannot convert; Spark's (ANSI) fails
        cast = exp.TryCast(this=node.this.copy(), to=node.args["to"].copy(), safe=True)
        if not node.args["to"].is_type(*exp.DataType.INTEGER_TYPES):
            return cast
        through_double = exp.TryCast(this=exp.TryCast(this=node.this.copy(), to=exp.DataType.build("DOUBLE"),
                                                      safe=True), to=node.args["to"].copy(), safe=True)
        return exp.Coalesce(this=cast, expressions=[through_double])  # Druid: '10.1' as a number is 10
    if isinstance(node, exp.Substring):  # Druid: NULL from a start past the end of the text
        start = node.args["start"]
        length = node.args.get("length")
        call = exp.Substring(this=node.this.copy(), start=start.copy(), length=length and length.copy())
        return _sql("CASE WHEN _i > char_length(_s) THEN NULL ELSE _c END", _i=start, _s=node.this, _c=call)
    if isinstance(node, exp.Trim) and node.args.get("expression") is not None:
        return node.copy()  # written out: Spark's own LTRIM(a, b) would trim a's characters from b
    if isinstance(node, exp.StrPosition):
        return exp.Anonymous(this="instr", expressions=[node.this, node.args["substr"]])
    if isinstance(node, exp.TimestampAdd | exp.TimestampDiff):
        name = "timestampadd" if isinstance(node, exp.TimestampAdd) else "timestampdiff"
        unit = exp.Var(this=node.args["unit"].name.upper())
        return exp.Anonymous(this=name, expressions=[unit, node.expression, node.this])
    return node


_ROW_ORDER_FUNCTIONS = (exp.FirstValue, exp.LastValue, exp.Lag, exp.Lead, exp.NthValue)
"""Window functions whose value depends on the order of the rows."""
_ORDERINGS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
_PLAIN_KINDS = ("multi_value", "string", "float", "double", "long")
"""Column kinds that are not complex (sketch or first/last) columns."""


def _number(node: exp.Expr) -> bool:
    """Whether ``node`` is a number whatever its columns' types: a numeric literal or arithmetic."""
    if isinstance(node, exp.Neg | exp.Paren):
        return _number(node.this)
    return isinstance(node, exp.Add | exp.Sub | exp.Mul | exp.Div) or (
        isinstance(node, exp.Literal) and not node.is_string)


def _typed_operands(node: exp.Expr) -> list[exp.Column]:
    """The columns whose type decides what ``node`` means: one compared with a number, or summed/averaged."""
    if isinstance(node, exp.Sum | exp.Avg):
        return [node.this] if isinstance(node.this, exp.Column) else []
    if not isinstance(node, _ORDERINGS):
        return []
    return [x for x, y in ((node.this, node.expression), (node.expression, node.this))
            if isinstance(x, exp.Column) and _number(y)]


def _top_n_column(select: exp.Select, query: str) -> exp.Column | None:
    """The column of a Druid top-N (``GROUP BY c ORDER BY c DESC LIMIT n``) without a stated NULLS order."""
    group, order = select.args.get("group"), select.args.get("order")
    if group is None or order is None or select.args.get("limit") is None or select.args.get("having") is not None:
        return None
    [*keys], [*orders] = group.expressions, order.expressions
    if len(keys) != 1 or len(orders) != 1 or not orders[0].args.get("desc") or "NULLS" in query.upper():
        return None
    key, by = keys[0], orders[0].this
    return key if isinstance(key, exp.Column) and isinstance(by, exp.Column) and by.name == key.name else None


def _typed(node: exp.Expr, kinds: dict[str, str]) -> exp.Expr:
    """A comparison or sum as Druid types it.

    A text column is read as a number (NULL where it is none); a number compared with a FLOAT
    column, as a FLOAT (``f1 = 0.1`` matches the stored 0.1f).
    """
    if not any(kinds.get(c.name.lower()) in ("string", "float") for c in _typed_operands(node)):
        return node
    typed = node.copy()
    for column in _typed_operands(typed):
        kind = kinds.get(column.name.lower())
        if kind == "string":
            column.replace(exp.TryCast(this=column.copy(), to=exp.DataType.build("DOUBLE"), safe=True))
        elif kind == "float" and not isinstance(typed, exp.Sum | exp.Avg):
            other = typed.expression if typed.this is column else typed.this
            if isinstance(other, exp.Literal):
                other.replace(exp.Cast(this=other.copy(), to=exp.DataType.build("FLOAT")))
    return typed


def _written_unit(unit: exp.Expr | None, query: str) -> bool:
    """Whether ``unit`` is a unit of TIME_FLOOR's, written out in ``query`` (sqlglot reads 'm' as MINUTE)."""
    return (isinstance(unit, exp.Literal) and unit.name.upper() in _FLOOR_UNITS
            and re.search(rf"'{unit.name}'", query, re.IGNORECASE) is not None)


def _integral(node: exp.Expr) -> bool:
    """Whether ``node`` is a whole number whatever its columns' types.

    An integer literal, a cast to an integer type, a count, or sums and products of those.
    """
    if isinstance(node, exp.Paren):
        return _integral(node.this)
    if isinstance(node, exp.Add | exp.Sub | exp.Mul):
        return _integral(node.this) and _integral(node.expression)
    if isinstance(node, exp.Cast | exp.TryCast):
        return bool(node.args["to"].is_type(*exp.DataType.INTEGER_TYPES))
    if isinstance(node, exp.Coalesce):
        return all(_integral(e) for e in (node.this, *node.expressions))
    return isinstance(node, exp.Count) or (isinstance(node, exp.Literal) and node.is_int)


def _divide(a: exp.Expr, b: exp.Expr) -> exp.Expr:
    """``a / b`` as Druid divides: whole numbers give a whole number, cut toward zero."""
    if _integral(a) and _integral(b):
        return _sql("_a DIV _b", _a=a, _b=b)
    return exp.Div(this=a.copy(), expression=b.copy())


def _unicode(text: str) -> str:
    r"""A Unicode string literal's text: ``\05E8`` and ``\+01F600`` are code points, ``\\`` a backslash."""
    return re.sub(r"\\(\\|\+[0-9A-Fa-f]{6}|[0-9A-Fa-f]{4})",
                  lambda m: "\\" if m.group(1) == "\\" else chr(int(m.group(1).lstrip("+"), 16)), text)


def _like_escape(node: exp.Escape) -> exp.Expr:
    """LIKE ... ESCAPE as Druid reads it: the escape character may precede any character.

    Spark allows it only before ``%``, ``_`` and itself, so it is dropped before the others.
    """
    like, escape = node.this, node.expression
    pattern = like.expression
    if not (isinstance(pattern, exp.Literal) and pattern.is_string and isinstance(escape, exp.Literal)
            and len(escape.this) == 1):
        return node
    mark = escape.this
    kept = re.sub(re.escape(mark) + "(.)", lambda m: m.group(0) if m.group(1) in ("%", "_", mark) else m.group(1),
                  pattern.this, flags=re.DOTALL)
    copy = node.copy()
    copy.this.set("expression", exp.Literal.string(kept))
    return copy


def _table(node: exp.Table, tables: set[str]) -> exp.Expr:
    schema, name = node.db.lower(), node.name
    if schema == "druid":
        return exp.Table(this=exp.to_identifier(name, quoted=True), alias=node.args.get("alias"))
    qualified = f"{schema}.{name.lower()}"
    if qualified not in METADATA_TABLES:
        if schema in ("information_schema", "sys"):
            raise QueryError(f"{node.db}.{name}: no such table; there are "
                             f"{', '.join(sorted(METADATA_TABLES))}", "TABLE_OR_VIEW_NOT_FOUND")
        return node
    tables.add(qualified)
    alias = node.args.get("alias") or exp.TableAlias(this=exp.to_identifier(name, quoted=True))
    return exp.Table(this=exp.to_identifier(metadata_view(qualified), quoted=True), alias=alias)


# --- functions ---------------------------------------------------------------------------------


def _sql(template: str, **args: exp.Expr) -> exp.Expr:
    """Spark SQL ``template`` with the columns named like ``args`` replaced by those expressions."""
    tree = sqlglot.parse_one(template, read="spark")
    return tree.transform(lambda n: args[n.name].copy() if isinstance(n, exp.Column) and n.name in args else n)


def _literal(args: list[exp.Expr], index: int, function: str, what: str) -> str | None:
    """A string literal argument (None when absent or NULL); anything else is refused."""
    if index >= len(args) or isinstance(args[index], exp.Null):
        return None
    if not (isinstance(args[index], exp.Literal) and args[index].is_string):
        raise QueryError(f"{function}: the {what} must be a string literal", "UNSUPPORTED_DRUID_SQL")
    return str(args[index].this)


def _arity(function: str, args: list[exp.Expr], low: int, high: int) -> None:
    if not low <= len(args) <= high:
        expected = f"{low} argument" + ("" if low == 1 else "s") if low == high else f"{low} to {high} arguments"
        raise QueryError(f"{function} takes {expected}, got {len(args)}", "UNSUPPORTED_DRUID_SQL")


def _utc_only(function: str, args: list[exp.Expr], index: int) -> None:
    zone = _literal(args, index, function, "time zone")
    if zone is not None and zone.upper() not in UTC_NAMES:
        raise QueryError(f"{function}: time zone {zone!r} is not supported; timestamps are UTC",
                         "UNSUPPORTED_DRUID_SQL")


def parse_period(text: str) -> tuple[int, str] | None:
    """(count, unit) of a one-unit ISO-8601 period such as ``PT15M`` (unit ``MINUTE``); None if not one."""
    found = _PERIOD.fullmatch(text)
    if found is None:
        return None
    if found.group(1):
        return int(found.group(1)), _DATE_UNITS[found.group(2).upper()]
    return int(found.group(3)), _TIME_UNITS[found.group(4).upper()]


def _period(function: str, args: list[exp.Expr], index: int = 1) -> tuple[int, str]:
    text = _literal(args, index, function, "period")
    period = parse_period(text or "")
    if period is None:
        raise QueryError(f"{function}: period {text!r} is not supported; use one ISO-8601 unit such as PT1H, "
                         "PT15M, P1D, P1W, P1M, P3M or P1Y", "UNSUPPORTED_DRUID_SQL")
    return period


def _trunc(ts: exp.Expr, unit: str) -> exp.Expr:
    return exp.Anonymous(this="date_trunc", expressions=[exp.Literal.string(unit), ts.copy()])


def _floor(ts: exp.Expr, count: int, unit: str) -> exp.Expr:
    """Druid's period floor: one unit truncates; a multiple counts whole periods from the epoch."""
    if count == 1 or (unit == "MONTH" and count == 3):
        return _trunc(ts, unit if count == 1 else "QUARTER")
    n = exp.Literal.number(count)
    if unit in MILLIS:
        return _sql("timestamp_millis(floor(unix_millis(_t) / _n) * _n)", _t=ts,
                    _n=exp.Literal.number(count * MILLIS[unit]))
    if unit == "MONTH":
        return _sql("CAST(add_months(DATE'1970-01-01', CAST(floor(((year(_t) - 1970) * 12 + month(_t) - 1) / _n) "
                    "* _n AS INT)) AS TIMESTAMP)", _t=ts, _n=n)
    return _sql("make_timestamp(CAST(1970 + floor((year(_t) - 1970) / _n) * _n AS INT), 1, 1, 0, 0, 0)", _t=ts, _n=n)


def _shift(ts: exp.Expr, count: int, unit: str, step: exp.Expr) -> exp.Expr:
    amount = _sql("_n * _s", _n=exp.Literal.number(count), _s=step)
    return exp.Anonymous(this="timestampadd", expressions=[exp.Var(this=unit), amount, ts.copy()])


def _ceil(ts: exp.Expr, floor: exp.Expr, unit: str, count: int) -> exp.Expr:
    return _sql("CASE WHEN _f = _t THEN _t ELSE _g END", _f=floor, _t=ts,
                _g=_shift(floor, count, unit, exp.Literal.number(1)))


def _time_floor(args: list[exp.Expr]) -> exp.Expr:
    _arity("TIME_FLOOR", args, 2, 4)
    if _literal(args, 2, "TIME_FLOOR", "origin") is not None:
        raise QueryError("TIME_FLOOR: an origin is not supported", "UNSUPPORTED_DRUID_SQL")
    _utc_only("TIME_FLOOR", args, 3)
    return _floor(args[0], *_period("TIME_FLOOR", args))


def _time_ceil(args: list[exp.Expr]) -> exp.Expr:
    _arity("TIME_CEIL", args, 2, 4)
    if _literal(args, 2, "TIME_CEIL", "origin") is not None:
        raise QueryError("TIME_CEIL: an origin is not supported", "UNSUPPORTED_DRUID_SQL")
    _utc_only("TIME_CEIL", args, 3)
    count, unit = _period("TIME_CEIL", args)
    return _ceil(args[0], _floor(args[0], count, unit), unit, count)


def _time_shift(args: list[exp.Expr]) -> exp.Expr:
    _arity("TIME_SHIFT", args, 3, 4)
    _utc_only("TIME_SHIFT", args, 3)
    return _shift(args[0], *_period("TIME_SHIFT", args), args[2])


def _time_extract(args: list[exp.Expr]) -> exp.Expr:
    _arity("TIME_EXTRACT", args, 2, 3)
    _utc_only("TIME_EXTRACT", args, 2)
    unit = (_literal(args, 1, "TIME_EXTRACT", "unit") or "").upper()
    if unit not in _EXTRACT:
        raise QueryError(f"TIME_EXTRACT: unit {unit!r} is not supported; use one of {', '.join(_EXTRACT)}",
                         "UNSUPPORTED_DRUID_SQL")
    return _sql(_EXTRACT[unit], _t=args[0])


def _time_parse(args: list[exp.Expr]) -> exp.Expr:
    _arity("TIME_PARSE", args, 1, 3)
    _utc_only("TIME_PARSE", args, 2)
    pattern = _literal(args, 1, "TIME_PARSE", "pattern")
    if pattern is None:  # ISO-8601; Druid answers NULL for what does not parse
        return _sql("try_cast(_s AS TIMESTAMP)", _s=args[0])
    return _sql("try_to_timestamp(_s, _p)", _s=args[0], _p=exp.Literal.string(pattern))


def _time_format(args: list[exp.Expr]) -> exp.Expr:
    _arity("TIME_FORMAT", args, 1, 3)
    _utc_only("TIME_FORMAT", args, 2)
    pattern = _literal(args, 1, "TIME_FORMAT", "pattern") or _ISO_FORMAT
    return _sql("date_format(_t, _p)", _t=args[0], _p=exp.Literal.string(pattern))


def _time_in_interval(args: list[exp.Expr]) -> exp.Expr:
    """TIME_IN_INTERVAL(t, 'start/end'): ``start <= t < end``; either end may be a period from the other."""
    _arity("TIME_IN_INTERVAL", args, 2, 2)
    text = _literal(args, 1, "TIME_IN_INTERVAL", "interval") or ""
    parts = text.split("/")
    periods = [parse_period(p) for p in parts]
    try:
        if len(parts) != 2 or all(periods):
            raise ValueError(text)
        times = [None if period else datetime.fromisoformat(p).astimezone(UTC) for p, period in zip(
            parts, periods, strict=True)]
    except ValueError:
        raise QueryError(f"TIME_IN_INTERVAL: {text!r} is not an ISO 8601 interval (start/end, start/period or "
                         "period/end)", "UNSUPPORTED_DRUID_SQL") from None
    bounds = [f"TIMESTAMP '{t:%Y-%m-%d %H:%M:%S.%f}'" if t else "" for t in times]
    for i, period in enumerate(periods):
        if period:
            sign = "+" if i else "-"
            bounds[i] = f"{bounds[1 - i]} {sign} INTERVAL {period[0]} {period[1]}"
    return exp.Paren(this=_sql(f"_t >= {bounds[0]} AND _t < {bounds[1]}", _t=args[0]))


def _operator(druid_name: str, template: str, arity: int) -> Callable[[list[exp.Expr]], exp.Expr]:
    """A Druid function that is a Spark expression (``_a``, ``_b``: its arguments)."""
    def translate_call(args: list[exp.Expr]) -> exp.Expr:
        _arity(druid_name, args, arity, arity)
        return _sql(template, **dict(zip(("_a", "_b"), args, strict=False)))
    return translate_call


def _rename(druid_name: str, spark_name: str, arity: int) -> Callable[[list[exp.Expr]], exp.Expr]:
    """A Druid function that is a Spark function under another name."""
    def translate_call(args: list[exp.Expr]) -> exp.Expr:
        _arity(druid_name, args, arity, arity)
        return exp.Anonymous(this=spark_name, expressions=[a.copy() for a in args])
    return translate_call


def _by_time(druid_name: str, spark_name: str, by_argument: bool) -> Callable[[list[exp.Expr]], exp.Expr]:
    """LATEST/EARLIEST(expr[, maxBytes]) by ``__time``; LATEST_BY/EARLIEST_BY(expr, time[, maxBytes])."""
    def translate_call(args: list[exp.Expr]) -> exp.Expr:
        low = 2 if by_argument else 1
        _arity(druid_name, args, low, low + 1)
        by = args[1] if by_argument else exp.column("__time", quoted=True)
        if isinstance(by, exp.Column) and by.name != "__time":  # no other column of a datasource is a TIMESTAMP
            raise QueryError(f"{druid_name}: the time argument must be a TIMESTAMP, such as __time or "
                             f"MILLIS_TO_TIMESTAMP({by.name}); {by.name} is not", "UNSUPPORTED_DRUID_SQL")
        return exp.Anonymous(this=spark_name, expressions=[args[0].copy(), by.copy()])
    return translate_call


def _any_value(node: exp.Anonymous) -> exp.Expr:
    """ANY_VALUE(expr[, maxBytes]): over a datasource, the earliest row's, as Druid's scan meets rows first."""
    args = list(node.expressions)
    _arity("ANY_VALUE", args, 1, 2)
    select = node.find_ancestor(exp.Select) or exp.Select()
    source = select.args.get("from_")
    table = source.this if source is not None else None
    ctes = {cte.alias_or_name.lower() for cte in node.root().find_all(exp.CTE)}
    over_table = (isinstance(table, exp.Table) and not select.args.get("joins") and not select.args.get("laterals")
                  and table.db.lower() not in ("sys", "information_schema") and table.name.lower() not in ctes
                  and not table.name.startswith("__druid_"))  # a datasource: it has __time
    value: exp.Expr = exp.Anonymous(this="min_by", expressions=[args[0].copy(), exp.column("__time", quoted=True)]) \
        if over_table else exp.Anonymous(this="any_value", expressions=[args[0].copy()])
    if len(args) == 2:
        chars = _integer(args, 1, "ANY_VALUE", "maxBytes", 1024, 0, 2**31 - 1)
        value = exp.Anonymous(this="left", expressions=[value, exp.Literal.number(chars)])
    return value


def _integer(args: list[exp.Expr], index: int, function: str, what: str, default: int, low: int,
             high: int) -> int:
    """An integer literal argument in ``[low, high]`` (``default`` when absent)."""
    if index >= len(args):
        return default
    value = args[index]
    if not (isinstance(value, exp.Literal) and value.is_int and low <= int(value.this) <= high):
        raise QueryError(f"{function}: the {what} must be an integer literal from {low} to {high}",
                         "UNSUPPORTED_DRUID_SQL")
    return int(value.this)


def _approx_distinct_hll(args: list[exp.Expr]) -> exp.Expr:
    """Spark's HLL++ at the relative error of Druid's HLL sketch of ``lgK`` (1.04 / sqrt(2^lgK))."""
    _arity("APPROX_COUNT_DISTINCT_DS_HLL", args, 1, 3)
    lg_k = _integer(args, 1, "APPROX_COUNT_DISTINCT_DS_HLL", "lgK", 12, 4, 21)
    if (_literal(args, 2, "APPROX_COUNT_DISTINCT_DS_HLL", "tgtHllType") or "HLL_4") not in ("HLL_4", "HLL_6", "HLL_8"):
        raise QueryError("APPROX_COUNT_DISTINCT_DS_HLL: tgtHllType must be HLL_4, HLL_6 or HLL_8",
                         "UNSUPPORTED_DRUID_SQL")
    return _approx_distinct(args[0], 1.04 / 2 ** (lg_k / 2))


def _approx_distinct_theta(args: list[exp.Expr]) -> exp.Expr:
    """Spark's HLL++ at the relative error of Druid's theta sketch of ``size`` entries (1 / sqrt(size))."""
    _arity("APPROX_COUNT_DISTINCT_DS_THETA", args, 1, 2)
    size = _integer(args, 1, "APPROX_COUNT_DISTINCT_DS_THETA", "size", 16384, 16, 2**26)
    if size & (size - 1):
        raise QueryError("APPROX_COUNT_DISTINCT_DS_THETA: the size must be a power of 2", "UNSUPPORTED_DRUID_SQL")
    return _approx_distinct(args[0], 1 / size ** 0.5)


def _approx_distinct(value: exp.Expr, relative_error: float) -> exp.Expr:
    """A sketch's distinct count; as DataSketches, it skips the empty string."""
    return exp.Anonymous(this="approx_count_distinct",
                         expressions=[sketch_argument(value), exp.Literal.number(round(relative_error, 6))])


def _approx_quantile(args: list[exp.Expr]) -> exp.Expr:
    """Spark's percentile sketch with a rank error of 0.01%, within any quantiles sketch's (k <= 32768)."""
    return exp.Anonymous(this="percentile_approx", expressions=[
        _sql("CAST(_v AS DOUBLE)", _v=args[0]), _probability(args), exp.Literal.number(10_000)])


def _probability(args: list[exp.Expr]) -> exp.Expr:
    """APPROX_QUANTILE_DS's probability argument (and its arity checked)."""
    _arity("APPROX_QUANTILE_DS", args, 2, 3)
    _integer(args, 2, "APPROX_QUANTILE_DS", "k", 128, 2, 32768)
    probability = args[1]
    if not (isinstance(probability, exp.Literal) and not probability.is_string
            and 0 <= float(probability.this) <= 1):
        raise QueryError("APPROX_QUANTILE_DS: the probability must be a number literal from 0 to 1",
                         "UNSUPPORTED_DRUID_SQL")
    return probability.copy()


_UNSUPPORTED = frozenset({"ARRAY_QUANTILE", "BITWISE_CONVERT_DOUBLE_TO_LONG_BITS",
                          "BITWISE_CONVERT_LONG_BITS_TO_DOUBLE", "HUMAN_READABLE_BINARY_BYTE_FORMAT",
                          "HUMAN_READABLE_DECIMAL_BYTE_FORMAT", "HUMAN_READABLE_DECIMAL_FORMAT",
                          "HLL_SKETCH_ESTIMATE_WITH_ERROR_BOUNDS", "THETA_SKETCH_ESTIMATE_WITH_ERROR_BOUNDS",
                          "HLL_SKETCH_TO_STRING", "THETA_SKETCH_TO_STRING", "DS_QUANTILE_SUMMARY"})
_UNSUPPORTED_PREFIXES = ("DS_TUPLE_", "DS_CDF", "DS_RANK", "DS_QUANTILES_SKETCH", "DS_GET_QUANTILE",
                         "BLOOM_FILTER", "SPECTATOR_HISTOGRAM")
"""Druid functions, by name, that are refused as not supported (rather than as unknown)."""

_DRUID_DEFECTS = {"BIT_AND": "BIT_AND is refused: Druid's starts from 0, so it answers 0 for every group with a value, "
                             "where a bitwise AND would not; BIT_OR and BIT_XOR are supported"}
"""Functions whose Druid answers are wrong: refused, so that no answer here differs from Druid's unseen."""

_SKETCH_FUNCTIONS = frozenset({"APPROX_COUNT_DISTINCT_DS_HLL", "APPROX_COUNT_DISTINCT_DS_THETA", "APPROX_QUANTILE_DS",
                               "DS_HLL", "DS_THETA"})
_BY_TIME = {"EARLIEST": "min_by", "EARLIEST_BY": "min_by", "LATEST": "max_by", "LATEST_BY": "max_by"}
_ESTIMATES = frozenset({"theta_sketch_estimate", "hll_sketch_estimate", "kll_sketch_get_quantile_double"})


def _is_estimate(node: exp.Expr) -> bool:
    """Whether ``node`` is an estimate of a merged sketch (its aggregate is its first argument)."""
    return isinstance(node, exp.Anonymous) and str(node.this).lower() in _ESTIMATES and bool(node.expressions)


def _complex_argument(node: exp.Expr) -> exp.Column | None:
    """The column a function that reads sketch or first/last columns differently is over, if a column.

    Those functions: the sketch functions, ``APPROX_COUNT_DISTINCT``, ``COUNT(DISTINCT)``, ``EARLIEST``
    and ``LATEST`` (and their ``_BY`` forms).
    """
    if (isinstance(node, exp.Anonymous) and str(node.this).upper() in _SKETCH_FUNCTIONS | _BY_TIME.keys()
            and node.expressions):
        argument = node.expressions[0]
    elif isinstance(node, exp.ApproxDistinct):
        argument = node.this
    elif isinstance(node, exp.Count) and isinstance(node.this, exp.Distinct) and len(node.this.expressions) == 1:
        argument = node.this.expressions[0]
    else:
        return None
    return argument if isinstance(argument, exp.Column) else None


def _over_complex(node: exp.Expr, column: exp.Column, kind: str) -> exp.Expr:
    """``node`` (see :func:`_complex_argument`) over a column of stored sketches or first/last pairs.

    Sketches merge into the answer; ``EARLIEST``/``LATEST`` (``_BY``) take the value of the
    pair with the earliest (latest) stored time, the record's own, as Druid does.
    """
    function = str(node.this).upper() if isinstance(node, exp.Anonymous) else "COUNT(DISTINCT)"
    args = list(node.expressions) if isinstance(node, exp.Anonymous) else [column]
    pairs = kind.startswith("pair:")
    if pairs != (function in _BY_TIME):
        what, use = ("first/last values", "EARLIEST or LATEST") if pairs else ("sketches", "a sketch function")
        raise QueryError(f"{function} over {column.name}, a column of {what}: use {use}", "UNSUPPORTED_DRUID_SQL")
    return _over_pairs(function, args, column, kind) if pairs else _over_sketches(function, args, column, kind)


def _over_pairs(function: str, args: list[exp.Expr], column: exp.Column, kind: str) -> exp.Expr:
    """EARLIEST/LATEST (``_BY``) over first/last pairs: the value of the earliest (latest) stored time.

    Pairs are ordered as ingestion and compaction order them (:func:`indexing_task.metric_sql.pair_order`):
    time, offset (-1 where not stored), a null value first, the value.
    """
    def field(name: str) -> exp.Expr:
        return exp.Dot.build([column.copy(), exp.to_identifier(name, quoted=True)])

    order = _sql("CASE WHEN _pair IS NOT NULL THEN named_struct('t', _t, 'o', coalesce(_o, -1), 'n', _v IS NOT NULL, "
                 "'v', _v) END", _pair=column, _t=field("lhs"), _o=field("offset"), _v=field("rhs"))
    picked = exp.Anonymous(this=_BY_TIME[function], expressions=[field("rhs"), order])
    size = 2 if function.endswith("_BY") else 1  # maxBytes: Druid cuts a string to it when querying too
    if kind == "pair:string" and len(args) > size:
        chars = _integer(args, size, function, "maxBytes", 1024, 0, 2**31 - 1)
        return exp.Anonymous(this="left", expressions=[picked, exp.Literal.number(chars)])
    return picked


def _over_sketches(function: str, args: list[exp.Expr], column: exp.Column, kind: str) -> exp.Expr:
    """A distinct count or quantile over stored sketches: they merge into the answer."""
    sketch = Sketch.parse(kind)
    wanted = {"theta": "APPROX_COUNT_DISTINCT_DS_THETA", "hll": "APPROX_COUNT_DISTINCT_DS_HLL",
              "kll": "APPROX_QUANTILE_DS"}[sketch.family]
    if function in _SKETCH_FUNCTIONS - {wanted} or (sketch.family == "kll" and function != wanted):
        raise QueryError(f"{function} over {column.name}, a column of {sketch.family.upper()} sketches: use "
                         f"{wanted}", "UNSUPPORTED_DRUID_SQL")
    if sketch.family == "kll":
        return _sql("kll_sketch_get_quantile_double(kll_merge_agg_double(_c), _p)", _c=column,
                    _p=_probability(args))
    if sketch.family == "hll":
        _arity(function, args, 1, 3)
        return _sql("hll_sketch_estimate(hll_union_agg(_c, true))", _c=column)
    _arity(function, args, 1, 2)
    size = _integer(args, 1, function, "size", sketch.size, 16, 2**26)
    return _sql("theta_sketch_estimate(theta_union_agg(_c, _k))", _c=column,
                _k=exp.Literal.number(Sketch("theta", size).lg_size))


_FUNCTIONS: dict[str, Callable[[list[exp.Expr]], exp.Expr]] = {
    "TIME_FLOOR": _time_floor, "TIME_CEIL": _time_ceil, "TIME_SHIFT": _time_shift, "TIME_EXTRACT": _time_extract,
    "TIME_PARSE": _time_parse, "TIME_FORMAT": _time_format,
    "MILLIS_TO_TIMESTAMP": _rename("MILLIS_TO_TIMESTAMP", "timestamp_millis", 1),
    "TIMESTAMP_TO_MILLIS": _rename("TIMESTAMP_TO_MILLIS", "unix_millis", 1),
    "LATEST": _by_time("LATEST", "max_by", False), "EARLIEST": _by_time("EARLIEST", "min_by", False),
    "LATEST_BY": _by_time("LATEST_BY", "max_by", True), "EARLIEST_BY": _by_time("EARLIEST_BY", "min_by", True),
    "STRLEN": _rename("STRLEN", "length", 1), "TEXTCAT": _rename("TEXTCAT", "concat", 2),
    "CONTAINS_STRING": _rename("CONTAINS_STRING", "contains", 2),
    "APPROX_COUNT_DISTINCT_DS_HLL": _approx_distinct_hll, "APPROX_COUNT_DISTINCT_DS_THETA": _approx_distinct_theta,
    "APPROX_QUANTILE_DS": _approx_quantile, "TIME_IN_INTERVAL": _time_in_interval,
    "BITWISE_AND": _operator("BITWISE_AND", "_a & _b", 2), "BITWISE_OR": _operator("BITWISE_OR", "_a | _b", 2),
    "BITWISE_XOR": _operator("BITWISE_XOR", "_a ^ _b", 2),
    "BITWISE_COMPLEMENT": _operator("BITWISE_COMPLEMENT", "~_a", 1),
    "BITWISE_SHIFT_LEFT": _operator("BITWISE_SHIFT_LEFT", "shiftleft(_a, _b)", 2),
    "BITWISE_SHIFT_RIGHT": _operator("BITWISE_SHIFT_RIGHT", "shiftright(_a, _b)", 2),
    "APPROX_COUNT_DISTINCT_BUILTIN": _rename("APPROX_COUNT_DISTINCT_BUILTIN", "approx_count_distinct", 1),
    "DECODE_BASE64_UTF8": _operator("DECODE_BASE64_UTF8", "CAST(unbase64(_a) AS STRING)", 1),
}

_AGGREGATES = frozenset("""
    ANY_VALUE APPROX_COUNT_DISTINCT APPROX_COUNT_DISTINCT_BUILTIN APPROX_COUNT_DISTINCT_DS_HLL
    APPROX_COUNT_DISTINCT_DS_THETA APPROX_QUANTILE_DS APPROX_PERCENTILE AVG BIT_AND BIT_OR BIT_XOR BOOL_AND BOOL_OR
    CORR COUNT COUNT_IF COVAR_POP COVAR_SAMP DS_HLL DS_THETA EARLIEST EARLIEST_BY EVERY FIRST HLL_SKETCH_AGG
    HLL_UNION_AGG KLL_MERGE_AGG_DOUBLE KURTOSIS LAST LATEST LATEST_BY MAX MAX_BY MEAN MEDIAN MIN MIN_BY PERCENTILE
    PERCENTILE_APPROX SKEWNESS SOME STD STDDEV STDDEV_POP STDDEV_SAMP SUM THETA_SKETCH_AGG THETA_UNION_AGG TRY_AVG
    TRY_SUM VAR_POP VAR_SAMP VARIANCE ANY""".split())

FUNCTIONS: dict[str, bool] = {name.upper(): name.upper() in _AGGREGATES for name in (
    *ALLOWED_FUNCTIONS, *_FUNCTIONS, *MV_FUNCTIONS, *SKETCH_OBJECT_FUNCTIONS, "ANY_VALUE", "SAFE_DIVIDE",
    "STRING_TO_ARRAY", "ARRAY_APPEND", "ARRAY_PREPEND", "ARRAY_CONTAINS", "ARRAY_TO_STRING", "DATE_TRUNC")
    if name.replace("_", "").isalnum() and name.upper() not in _DRUID_DEFECTS}
"""Every function a query may call (Druid's and Spark's allowed ones, upper case): whether it aggregates."""
