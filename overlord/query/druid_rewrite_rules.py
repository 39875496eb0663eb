"""The rules that rewrite Druid SQL's syntax tree into Spark SQL's, one per Druid construct, in the order tried.

Each rule is a function of a node (and a :class:`RewriteContext`) that gives the node rewritten
with Druid's semantics, or None when it does not apply; a rule may also refuse the query (a
:class:`QueryError`). :func:`overlord.query.druid_sql.translate` tries :data:`RULES` on every node,
children first, and the first rule that applies wins. Druid's own functions are translated by
:mod:`overlord.query.druid_functions`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sqlglot import exp

from overlord.query.collect_sql import COLLECTED_ARRAY, collecting_aggregate
from overlord.query.druid_functions import (
    DRUID_FUNCTIONS,
    FLOOR_UNITS,
    any_value,
    ceil_time,
    complex_argument,
    over_complex,
    spark_sql,
    truncate_time,
)
from overlord.query.druid_string_functions import STRING_FUNCTIONS
from overlord.query.metadata_tables import SCHEMAS
from overlord.query.multi_value import MV_FUNCTIONS, is_mv
from overlord.query.query_errors import QueryError
from overlord.query.sketch_sql import SKETCH_OBJECT_FUNCTIONS

__all__ = ["DRUID_DEFECTS", "METADATA_TABLES", "RULES", "RewriteContext", "Rule", "array_argument_columns",
           "metadata_view", "refuse_null_tests_druid_folds", "text_aliases",
           "text_in_numbers", "top_n_column", "typed_operands"]

METADATA_TABLES = frozenset(SCHEMAS)
"""``schema.table`` names (lower case) of the metadata tables."""


def metadata_view(table: str) -> str:
    """The name of the view that serves metadata table ``table`` (``schema.table``)."""
    return "__druid_" + table.replace(".", "_")


_UNSUPPORTED = frozenset({"ARRAY_QUANTILE", "BITWISE_CONVERT_DOUBLE_TO_LONG_BITS",
                          "BITWISE_CONVERT_LONG_BITS_TO_DOUBLE", "HUMAN_READABLE_BINARY_BYTE_FORMAT",
                          "HUMAN_READABLE_DECIMAL_BYTE_FORMAT", "HUMAN_READABLE_DECIMAL_FORMAT",
                          "HLL_SKETCH_ESTIMATE_WITH_ERROR_BOUNDS", "THETA_SKETCH_ESTIMATE_WITH_ERROR_BOUNDS",
                          "HLL_SKETCH_TO_STRING", "THETA_SKETCH_TO_STRING", "DS_QUANTILE_SUMMARY"})
_UNSUPPORTED_PREFIXES = ("DS_TUPLE_", "DS_CDF", "DS_RANK", "DS_QUANTILES_SKETCH", "DS_GET_QUANTILE",
                         "BLOOM_FILTER", "SPECTATOR_HISTOGRAM")
"""Druid functions, by name, that are refused as not supported (rather than as unknown)."""

DRUID_DEFECTS = {"BIT_AND": "BIT_AND is refused: Druid's starts from 0, so it answers 0 for every group with a value, "
                            "where a bitwise AND would not; BIT_OR and BIT_XOR are supported"}
"""Functions whose Druid answers are wrong: refused, so that no answer here differs from Druid's unseen."""

_TYPED_NOT_NULL = {"ARRAY_ORDINAL_OF": "ARRAY_ORDINAL_OF", "ARRAYSLICE": "ARRAY_SLICE"}
"""Functions Druid's planner types NOT NULL though they answer NULL (over NULL, or past the end): it folds
``IS NULL`` over them to false, so a NULL row is not counted (ARRAY_OFFSET_OF's is)."""


def refuse_null_tests_druid_folds(tree: exp.Expr) -> None:
    """Refuse ``IS [NOT] NULL`` over a :data:`_TYPED_NOT_NULL` function, or over a column a (sub)query names it.

    Druid's answer is wrong there, and ours would differ from it.
    """

    def typed_not_null(node: exp.Expr) -> str | None:
        name = str(node.this).upper() if isinstance(node, exp.Anonymous) else type(node).__name__.upper()
        return _TYPED_NOT_NULL.get(name)

    aliases = {alias.alias.lower(): name for alias in tree.find_all(exp.Alias)
               if (name := typed_not_null(alias.this.unnest()))}
    for test in tree.find_all(exp.Is):
        tested = test.this.unnest()
        name = aliases.get(tested.name.lower()) if isinstance(tested, exp.Column) else typed_not_null(tested)
        if isinstance(test.expression, exp.Null) and name:
            raise QueryError(f"IS NULL over {name} is refused: Druid types it NOT NULL and answers IS NULL false "
                             "even where it is NULL", "UNSUPPORTED_DRUID_SQL")

_ESTIMATES = frozenset({"theta_sketch_estimate", "hll_sketch_estimate", "kll_sketch_get_quantile_double"})
_ROW_ORDER_FUNCTIONS = (exp.FirstValue, exp.LastValue, exp.Lag, exp.Lead, exp.NthValue)
"""Window functions whose value depends on the order of the rows."""
_ORDERINGS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
_SCALARS = ("string", "float", "double", "long")
"""Kinds of text and number columns."""
_PLAIN_KINDS = ("multi_value", "string", "float", "double", "long")
"""Column kinds that are not complex (sketch or first/last) columns."""


@dataclass(frozen=True)
class RewriteContext:
    """What a rule may read beyond its node, and where the table rule records the metadata tables read."""

    query: str
    """The query as written."""
    complex_columns: Mapping[str, str]
    """Kinds of the columns queried, by lower-case name (``translate``'s ``complex_columns``)."""
    multi_value: frozenset[str]
    """The multi-value columns among them."""
    tables: set[str] = field(default_factory=set)
    """The metadata tables the query reads (``schema.table``, lower case), added as they are met."""


Rule = Callable[[exp.Expr, RewriteContext], exp.Expr | None]
"""A rewrite rule: the node rewritten (the node itself: kept, no later rule tried), or None if it does not apply."""


def _schema_table(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """``druid.x`` is the datasource ``x``; ``INFORMATION_SCHEMA.*`` and ``sys.*`` are the metadata views."""
    if not (isinstance(node, exp.Table) and node.args.get("db") is not None):
        return None
    schema, name = node.db.lower(), node.name
    if schema == "druid":
        return exp.Table(this=exp.to_identifier(name, quoted=True), alias=node.args.get("alias"))
    qualified = f"{schema}.{name.lower()}"
    if qualified not in METADATA_TABLES:
        if schema in ("information_schema", "sys"):
            raise QueryError(f"{node.db}.{name}: no such table; there are "
                             f"{', '.join(sorted(METADATA_TABLES))}", "TABLE_OR_VIEW_NOT_FOUND")
        return node
    context.tables.add(qualified)
    alias = node.args.get("alias") or exp.TableAlias(this=exp.to_identifier(name, quoted=True))
    return exp.Table(this=exp.to_identifier(metadata_view(qualified), quoted=True), alias=alias)


def _over_complex_column(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid merges a column of stored sketches, and reads a first/last column by its pairs' times."""
    column = complex_argument(node)
    kind = None if column is None else context.complex_columns.get(column.name.lower())
    if column is None or kind is None or kind in _PLAIN_KINDS:  # multi-value: see rewrite_multi_value
        return None
    return over_complex(node, column, kind)


def _typed_comparison(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid reads a text column compared with a number, or summed, as a number; a number beside a FLOAT as one."""
    return _typed(node, context.complex_columns) if typed_operands(node) else None


def _text_in_numbers(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid compares text with a subquery's numbers as numbers, and text that is no number equals none of them.

    Spark would fail on the text: one that is a number is read as a DOUBLE; one that is not is compared
    with the numbers as text (never equal: every number's text is a number).
    """
    column = text_in_numbers(node)
    if column is None or context.complex_columns.get(column.name.lower()) not in ("long", "float", "double"):
        return None
    typed = node.copy()
    column, text = text_in_numbers(typed) or column, typed.this
    try:
        float(text.name.strip())
    except ValueError:
        column.replace(exp.cast(column.copy(), "STRING"))
    else:
        text.replace(exp.cast(text.copy(), "DOUBLE"))
    return typed


def _top_n_nulls_first(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid's top-N of a number column, descending, puts its nulls first."""
    if not (isinstance(node, exp.Select) and (top := top_n_column(node, context.query)) is not None
            and context.complex_columns.get(top.name.lower()) in ("long", "float", "double")):
        return None
    nulls_first = node.copy()
    nulls_first.args["order"].expressions[0].set("nulls_first", True)
    return nulls_first


def _estimate_of_filtered(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """A FILTER or OVER of a sketch's estimate is of its aggregate, inside the estimate."""
    if not (isinstance(node, exp.Filter | exp.Window) and _is_estimate(node.this)):
        return None
    estimate: exp.Expr = node.this.copy()
    wrapped = node.copy()
    wrapped.set("this", estimate.expressions[0])
    estimate.expressions[0] = wrapped
    return estimate


def _unicode_string(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    r"""Calcite's Unicode string literal ``U&'\05E8'``: its escapes are code points."""
    return exp.Literal.string(_unicode(node.this)) if isinstance(node, exp.UnicodeString) else None


def _array_constructor(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid's ``ARRAY[...]`` is Spark's ``array(...)``."""
    return node.copy() if isinstance(node, exp.Array) else None


def _pi(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Calcite's ``PI`` takes no parentheses."""
    if isinstance(node, exp.Column) and not node.table and not node.this.quoted and node.name.upper() == "PI":
        return exp.Anonymous(this="pi")
    return None


def _predicate_is(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """A predicate tested with IS is parenthesized, as Spark needs: ``(a IN (...)) IS TRUE``."""
    if isinstance(node, exp.Is) and isinstance(node.this, exp.Predicate):
        return exp.Is(this=exp.Paren(this=node.this.copy()), expression=node.expression.copy())
    return None


def _empty_group_by(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """``GROUP BY ()``: one group of every row, as an aggregate without GROUP BY."""
    if isinstance(node, exp.Select) and (group := node.args.get("group")) is not None and all(
            isinstance(key, exp.Tuple) and not key.expressions for key in group.expressions) and not any(
            group.args.get(part) for part in ("grouping_sets", "cube", "rollup")):
        without = node.copy()
        without.set("group", None)
        return without
    return None


def _refuse_split_subtotals(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid splits a grouping set's subtotals when ordered by another grouping column first with a LIMIT: refused."""
    # Druid sorts the rows by the ORDER BY before it merges the subtotal of a leading grouping column, and gives
    # that subtotal once per value of the ordering column: a 400 here rather than a different answer.
    if not isinstance(node, exp.Select):
        return None
    group, order = node.args.get("group"), node.args.get("order")
    sets = [key for key in (group.expressions if group else []) if isinstance(key, exp.GroupingSets | exp.Rollup
                                                                                 | exp.Cube)]
    if not sets or order is None or node.args.get("limit") is None:
        return None
    grouped = [column.name.lower() for key in sets for column in key.find_all(exp.Column)]
    keys = []
    for ordered in order.expressions:
        key = ordered.this
        if isinstance(key, exp.Literal) and key.is_int and 0 < int(key.this) <= len(node.expressions):
            key = node.expressions[int(key.this) - 1].unalias()
        if not (isinstance(key, exp.Column) and key.name.lower() in grouped):
            return None  # ordered by an aggregate or an expression: Druid orders after the subtotals
        keys.append(key.name.lower())
    if keys[0] != grouped[0]:
        raise QueryError(f"GROUPING SETS ordered by {keys[0]} with a LIMIT: Druid answers this shape with the "
                         f"subtotals of {grouped[0]} split by {keys[0]}; refused rather than answer differently "
                         f"(order by {grouped[0]} first, or drop the LIMIT)", "UNSUPPORTED_DRUID_SQL")
    return None


def _grouping_bits(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid's GROUPING of several arguments: one bit per argument, the first highest."""
    if not (isinstance(node, exp.Grouping) and len(node.expressions) > 1):
        return None
    bits: list[exp.Expr] = [exp.Mul(this=exp.Anonymous(this="grouping", expressions=[e.copy()]),
                                    expression=exp.Literal.number(2 ** i))
                            for i, e in enumerate(reversed(node.expressions))]
    return exp.Paren(this=functools.reduce(lambda a, b: exp.Add(this=b, expression=a), bits))


def _extract_epoch(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """``EXTRACT(EPOCH FROM t)``: the seconds since the epoch."""
    if isinstance(node, exp.Extract) and node.name.upper() == "EPOCH":
        return spark_sql("unix_seconds(CAST(_t AS TIMESTAMP))", _t=node.expression)
    return None


def _like_escape(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid's LIKE escape character may precede any character, Spark's only ``%``, ``_``, itself: dropped elsewhere."""
    if not (isinstance(node, exp.Escape) and isinstance(node.this, exp.Like | exp.ILike)):
        return None
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


def _refuse_unordered_window(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid takes the rows of FIRST_VALUE, LAG, ... over a window without ORDER BY in its scan order: refused."""
    if (isinstance(node, exp.Window) and isinstance(node.this, _ROW_ORDER_FUNCTIONS) and node.args.get("over")
            and not node.args.get("order") and not node.args.get("alias")):
        raise QueryError(f"{node.this.sql_name()} over a window without ORDER BY: Druid takes the rows in its scan "
                         "order, which is not kept here; add ORDER BY to the window", "UNSUPPORTED_DRUID_SQL")
    return None


def _following_frame(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Calcite's ``ROWS n FOLLOWING`` is ``BETWEEN CURRENT ROW AND n FOLLOWING``."""
    if not (isinstance(node, exp.WindowSpec) and node.args.get("start_side") == "FOLLOWING"
            and not node.args.get("end")):
        return None
    frame = node.copy()
    frame.set("end", frame.args["start"])
    frame.set("end_side", "FOLLOWING")
    frame.set("start", "CURRENT ROW")
    frame.set("start_side", None)
    return frame


def _safe_divide(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid's SAFE_DIVIDE: a zero divisor gives NULL, but ``0.0 / 0`` is 0 when either operand is not whole."""
    if not isinstance(node, exp.SafeDivide):
        return None
    a, b = node.this, node.expression
    quotient = _divide(a, b)
    if _integral(a) and _integral(b):
        return spark_sql("CASE WHEN _b <> 0 THEN _q END", _b=b, _q=quotient)
    whole = f"lower(typeof(_a)) IN {_WHOLE_TYPES} AND lower(typeof(_b)) IN {_WHOLE_TYPES}"  # a column's type
    return spark_sql(f"CASE WHEN _b <> 0 THEN _q WHEN _a = 0 AND NOT ({whole}) THEN 0 END", _a=a, _b=b, _q=quotient)


_WHOLE_TYPES = "('tinyint', 'smallint', 'int', 'integer', 'bigint', 'hugeint')"
"""``typeof``'s names of whole-number types (Spark's, and DuckDB's lowercased)."""


def _truncate(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid's ``TRUNCATE(x, digits)``: ``x`` cut toward zero to ``digits`` decimal digits.

    Negative digits cut left of the point; whole numbers stay whole.
    """
    if not isinstance(node, exp.Trunc):
        return None
    digits = node.args.get("decimals") or exp.Literal.number(0)
    cut = "CASE WHEN _x < 0 THEN ceil(_x, _d) ELSE floor(_x, _d) END"
    return spark_sql(f"CAST({cut} AS {'BIGINT' if _integral(node.this) else 'DOUBLE'})", _x=node.this, _d=digits)


def _whole_division(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid divides whole numbers to a whole number, cut toward zero."""
    if type(node) is exp.Div and _integral(node.this) and _integral(node.expression):
        return _divide(node.this, node.expression)
    return None


def _refuse_array_concat_agg(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid's ARRAY_CONCAT_AGG is not supported: refused."""
    if isinstance(node, exp.ArrayConcatAgg):
        raise QueryError("ARRAY_CONCAT_AGG is a Druid function this overlord does not support",
                         "UNSUPPORTED_DRUID_SQL")
    return None


def _collecting_aggregate(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid's ARRAY_AGG, STRING_AGG and LISTAGG (:mod:`overlord.query.collect_sql`)."""
    return collecting_aggregate(node, context.complex_columns)


def _refuse_function(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid functions not supported here, or whose Druid answers are wrong (``DRUID_DEFECTS``): refused."""
    if not isinstance(node, exp.Anonymous):
        return None
    name = str(node.this).upper()
    if name in _UNSUPPORTED or name.startswith(_UNSUPPORTED_PREFIXES):
        raise QueryError(f"{name} is a Druid function this overlord does not support", "UNSUPPORTED_DRUID_SQL")
    if name in DRUID_DEFECTS:
        raise QueryError(DRUID_DEFECTS[name], "UNSUPPORTED_DRUID_SQL")
    return None


def _sketch_object_function(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid's sketch objects (``DS_HLL``, ``THETA_SKETCH_ESTIMATE``, ...) as Spark's sketches."""
    if isinstance(node, exp.Anonymous) and (name := str(node.this).upper()) in SKETCH_OBJECT_FUNCTIONS:
        return SKETCH_OBJECT_FUNCTIONS[name](node, list(node.expressions))
    return None


_ARRAY_VALUES = (exp.ArrayAgg, exp.Array, exp.ArrayConcat, exp.ArrayAppend, exp.ArrayPrepend, exp.ArraySlice)
"""Expressions whose value is an array: an alias of one is a list to array functions (not a value to wrap)."""


def _lists(node: exp.Expr, context: RewriteContext) -> frozenset[str]:
    """The names array functions take as lists: multi-value columns, and aliases of arrays (a subquery's ARRAY_AGG)."""
    aliases = {alias.alias.lower() for alias in node.root().find_all(exp.Alias)
               if isinstance(alias.this, _ARRAY_VALUES) or alias.this.meta.get(COLLECTED_ARRAY)}
    return context.multi_value | aliases


def _multi_value_function(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid's ``MV_*`` functions over multi-value columns as lists."""
    if isinstance(node, exp.Anonymous) and (name := str(node.this).upper()) in MV_FUNCTIONS:
        return MV_FUNCTIONS[name](list(node.expressions), _lists(node, context))
    return None


def _any_value(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid's ANY_VALUE over a datasource is the earliest row's, as its scan meets rows first."""
    if isinstance(node, exp.Anonymous) and str(node.this).upper() == "ANY_VALUE":
        return any_value(node)
    return None


def _druid_function(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid's own functions (``TIME_FLOOR``, ``LATEST``, ``BITWISE_AND``, ...); any other call as written."""
    if not isinstance(node, exp.Anonymous):
        return None
    name = str(node.this).upper()
    translator = DRUID_FUNCTIONS.get(name) or STRING_FUNCTIONS.get(name)
    return translator(list(node.expressions)) if translator else node


def _unnest_multi_value(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid unnests a multi-value row with no values to one null row."""
    if not (isinstance(node, exp.Unnest) and any(is_mv(e, context.multi_value) for e in node.expressions)):
        return None
    unnested = node.copy()
    unnested.set("expressions", [spark_sql("IF(_v IS NULL OR size(_v) = 0, array(CAST(NULL AS STRING)), _v)", _v=e)
                                 if is_mv(e, context.multi_value) else e.copy() for e in node.expressions])
    return unnested


def _array_contains(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid's ARRAY_CONTAINS may be given an array to look for: all of its elements."""
    if isinstance(node, exp.ArrayContains):
        return MV_FUNCTIONS["MV_CONTAINS"]([node.this, node.expression], _lists(node, context))
    return None


def _array_concat(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid's ARRAY_CONCAT reads a text or number column as a one-element array (null stays null)."""
    if not any(_scalar(c, context) for c in array_argument_columns(node)):
        return None
    concat = node.copy()
    for column in array_argument_columns(concat):
        if _scalar(column, context):
            column.replace(_as_array(column))
    return concat


def _array_length(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid's ARRAY_LENGTH of a text or number column is 1 (of null, null): it reads a scalar as an array."""
    if isinstance(node, exp.ArraySize) and _scalar(node.this, context):
        return exp.Anonymous(this="size", expressions=[_as_array(node.this)])
    return None


def _date_trunc(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """``DATE_TRUNC('unit', t)`` truncates a timestamp (sqlglot would write Spark's date-only TRUNC)."""
    if isinstance(node, exp.DateTrunc) and _written_unit(node.args.get("unit"), context.query):
        return truncate_time(node.this, node.args["unit"].name.upper())
    return None


def _string_to_array(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid's STRING_TO_ARRAY delimiter is a regular expression, as Spark's ``split``'s."""
    if isinstance(node, exp.StringToArray):
        return exp.Anonymous(this="split", expressions=[node.this.copy(), node.expression.copy()])
    return None


def _array_append_prepend(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid's ARRAY_APPEND/ARRAY_PREPEND, argument order as written (``ARRAY_PREPEND(value, array)``)."""
    if not isinstance(node, exp.ArrayAppend | exp.ArrayPrepend):
        return None
    name = "MV_APPEND" if isinstance(node, exp.ArrayAppend) else "MV_PREPEND"
    return MV_FUNCTIONS[name]([node.this, node.expression], _lists(node, context))


def _array_slice(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid's ARRAY_SLICE (start inclusive, end exclusive, from 0), over multi-value columns too."""
    if not isinstance(node, exp.ArraySlice):
        return None
    bounds = [node.args[b] for b in ("start", "end") if node.args.get(b) is not None]
    return MV_FUNCTIONS["ARRAY_SLICE"]([node.this, *bounds], _lists(node, context))


def _array_to_string(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid's ARRAY_TO_STRING writes a null element as ``null`` (a text or number column: its one value)."""
    if isinstance(node, exp.ArrayToString):
        values = _as_array(node.this) if _scalar(node.this, context) else node.this.copy()
        return exp.Anonymous(this="array_join", expressions=[values, node.expression.copy(),
                                                             exp.Literal.string("null")])
    return None


def _floor_ceil_to_unit(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Calcite's ``FLOOR``/``CEIL(t TO unit)`` round a timestamp to a calendar unit."""
    if not (isinstance(node, exp.Floor | exp.Ceil) and node.args.get("to") is not None):
        return None
    unit = node.args["to"].name.upper()
    if unit not in FLOOR_UNITS:
        raise QueryError(f"{type(node).__name__.upper()}(... TO {unit}): unsupported unit; use one of "
                         f"{', '.join(sorted(FLOOR_UNITS))}", "UNSUPPORTED_DRUID_SQL")
    floor = truncate_time(node.this, unit)
    return floor if isinstance(node, exp.Floor) else ceil_time(node.this, floor, unit, 1)


def _regexp_extract(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid's REGEXP_EXTRACT group defaults to 0 (Spark's to 1), and no match is NULL (Spark's: '')."""
    if not isinstance(node, exp.RegexpExtract):
        return None
    group = node.args.get("group") or node.args.get("position") or exp.Literal.number(0)
    return spark_sql("nullif(regexp_extract(_s, _p, _g), '')", _s=node.this, _p=node.expression, _g=group)


def _lenient_cast(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid's CAST gives NULL for what it cannot convert (Spark's, ANSI, fails), and '10.1' as an integer is 10."""
    if type(node) is not exp.Cast:
        return None
    cast = exp.TryCast(this=node.this.copy(), to=node.args["to"].copy(), safe=True)
    if not node.args["to"].is_type(*exp.DataType.INTEGER_TYPES):
        return cast
    through_double = exp.TryCast(this=exp.TryCast(this=node.this.copy(), to=exp.DataType.build("DOUBLE"),
                                                  safe=True), to=node.args["to"].copy(), safe=True)
    return exp.Coalesce(this=cast, expressions=[through_double])


def _substring(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid's SUBSTRING from a start past the end of the text is NULL."""
    if not isinstance(node, exp.Substring):
        return None
    start = node.args["start"]
    length = node.args.get("length")
    call = exp.Substring(this=node.this.copy(), start=start.copy(), length=length and length.copy())
    return spark_sql("CASE WHEN _i > char_length(_s) THEN NULL ELSE _c END", _i=start, _s=node.this, _c=call)


def _trim_characters(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """``TRIM(... chars FROM s)`` written out: Spark's own ``LTRIM(a, b)`` would trim a's characters from b."""
    return node.copy() if isinstance(node, exp.Trim) and node.args.get("expression") is not None else None


def _strpos(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid's STRPOS is Spark's ``instr``; ``POSITION(s IN t FROM n)`` is ``locate(s, t, n)``."""
    if isinstance(node, exp.StrPosition) and node.args.get("position") is not None:
        return exp.Anonymous(this="locate", expressions=[node.args["substr"], node.this, node.args["position"]])
    if isinstance(node, exp.StrPosition):
        return exp.Anonymous(this="instr", expressions=[node.this, node.args["substr"]])
    return None


def _array_length_of_expression(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid's ARRAY_LENGTH of an array expression (``ARRAY_CONCAT(...)``, ...) is Spark's ``array_size``."""
    if isinstance(node, exp.ArraySize) and not isinstance(node.this, exp.Column):
        return exp.Anonymous(this="array_size", expressions=[node.this.copy()])
    return None


def _timestamp_add_diff(node: exp.Expr, context: RewriteContext) -> exp.Expr | None:
    """Druid's TIMESTAMPADD/TIMESTAMPDIFF(unit, ...) as Spark's functions of the same name and argument order."""
    if not isinstance(node, exp.TimestampAdd | exp.TimestampDiff):
        return None
    name = "timestampadd" if isinstance(node, exp.TimestampAdd) else "timestampdiff"
    unit = exp.Var(this=node.args["unit"].name.upper())
    return exp.Anonymous(this=name, expressions=[unit, node.expression, node.this])


RULES: tuple[Rule, ...] = (
    _schema_table, _over_complex_column, _typed_comparison, _text_in_numbers, _top_n_nulls_first,
    _estimate_of_filtered, _unicode_string, _array_constructor, _pi, _predicate_is, _empty_group_by,
    _refuse_split_subtotals, _grouping_bits, _extract_epoch, _like_escape, _refuse_unordered_window, _following_frame,
    _safe_divide, _truncate, _whole_division, _refuse_array_concat_agg, _collecting_aggregate, _refuse_function,
    _sketch_object_function, _multi_value_function, _any_value, _druid_function, _unnest_multi_value, _array_contains,
    _array_concat, _array_length, _date_trunc, _string_to_array, _array_append_prepend, _array_slice,
    _array_to_string, _floor_ceil_to_unit, _regexp_extract, _lenient_cast, _substring, _trim_characters, _strpos,
    _array_length_of_expression, _timestamp_add_diff,
)
"""The rules in the order they are tried: the first that applies to a node rewrites it (or refuses the query)."""


# --- helpers -------------------------------------------------------------------------------


def _is_estimate(node: exp.Expr) -> bool:
    """Whether ``node`` is an estimate of a merged sketch (its aggregate is its first argument)."""
    return isinstance(node, exp.Anonymous) and str(node.this).lower() in _ESTIMATES and bool(node.expressions)


def _number(node: exp.Expr) -> bool:
    """Whether ``node`` is a number whatever its columns' types: a numeric literal or arithmetic."""
    if isinstance(node, exp.Neg | exp.Paren):
        return _number(node.this)
    return isinstance(node, exp.Add | exp.Sub | exp.Mul | exp.Div) or (
        isinstance(node, exp.Literal) and not node.is_string)


def typed_operands(node: exp.Expr) -> list[exp.Column]:
    """The columns whose type decides what ``node`` means: one compared with a number, or summed/averaged."""
    if isinstance(node, exp.Sum | exp.Avg):
        return [node.this] if isinstance(node.this, exp.Column) else []
    if not isinstance(node, _ORDERINGS):
        return []
    return [x for x, y in ((node.this, node.expression), (node.expression, node.this))
            if isinstance(x, exp.Column) and _number(y)]


def array_argument_columns(node: exp.Expr) -> list[exp.Column]:
    """The columns ARRAY_CONCAT, ARRAY_LENGTH or ARRAY_TO_STRING ``node`` reads: a text or number one is one value."""
    if isinstance(node, exp.ArraySize | exp.ArrayToString):
        return [node.this] if isinstance(node.this, exp.Column) else []
    if not isinstance(node, exp.ArrayConcat):
        return []
    return [a for a in (node.this, *node.expressions) if isinstance(a, exp.Column)]


def _scalar(node: exp.Expr, context: RewriteContext) -> bool:
    """Whether ``node`` is a text or number column (not a multi-value one)."""
    return isinstance(node, exp.Column) and context.complex_columns.get(node.name.lower()) in _SCALARS


def _as_array(column: exp.Expr) -> exp.Expr:
    """A scalar as Druid's array functions read it: a one-element array, null when it is null."""
    return exp.If(this=exp.Is(this=column.copy(), expression=exp.Null()), true=exp.Null(),
                  false=exp.Array(expressions=[column.copy()]))


def text_in_numbers(node: exp.Expr) -> exp.Column | None:
    """The column of ``'text' [NOT] IN (SELECT column ...)``: the text's meaning depends on the column's type."""
    if not (isinstance(node, exp.In) and isinstance(node.this, exp.Literal) and node.this.is_string):
        return None
    query = node.args.get("query")
    select = query.this if isinstance(query, exp.Subquery) else query
    if not isinstance(select, exp.Select) or len(select.expressions) != 1:
        return None
    column = select.expressions[0]
    return column if isinstance(column, exp.Column) else None


_BY_BYTES = {"LATEST": 2, "EARLIEST": 2, "ANY_VALUE": 2, "LATEST_BY": 3, "EARLIEST_BY": 3}
"""Druid's aggregations whose string form takes a ``maxBytesPerValue``: its argument count."""
_TEXT_FUNCTIONS = (exp.Upper, exp.Lower, exp.Substring, exp.Concat, exp.DPipe, exp.Trim, exp.Left, exp.Right)


def text_aliases(tree: exp.Expr, kinds: Mapping[str, str]) -> dict[str, str]:
    """The names a query gives to text it computes (a subquery's string LATEST, an UPPER, ...): name -> "string".

    A sum or comparison of such a name outside reads it as a number, as Druid does (:func:`_typed`), where Spark
    would fail on the first value that is not one.
    """
    def text(node: exp.Expr) -> bool:
        if isinstance(node, exp.Anonymous):
            return _BY_BYTES.get(node.name.upper()) == len(node.expressions)
        if isinstance(node, exp.Column):
            return kinds.get(node.name.lower()) == "string"
        return isinstance(node, _TEXT_FUNCTIONS) or (isinstance(node, exp.Literal) and node.is_string)
    return {alias.alias.lower(): "string" for alias in tree.find_all(exp.Alias)
            if alias.alias and alias.alias.lower() not in kinds and text(alias.this)}


def top_n_column(select: exp.Select, query: str) -> exp.Column | None:
    """The column of a Druid top-N (``GROUP BY c ORDER BY c DESC LIMIT n``) without a stated NULLS order."""
    group, order = select.args.get("group"), select.args.get("order")
    if group is None or order is None or select.args.get("limit") is None or select.args.get("having") is not None:
        return None
    [*keys], [*orders] = group.expressions, order.expressions
    if len(keys) != 1 or len(orders) != 1 or not orders[0].args.get("desc") or "NULLS" in query.upper():
        return None
    key, by = keys[0], orders[0].this
    return key if isinstance(key, exp.Column) and isinstance(by, exp.Column) and by.name == key.name else None


def _typed(node: exp.Expr, kinds: Mapping[str, str]) -> exp.Expr:
    """A comparison or sum as Druid types it.

    A text column is read as a number (NULL where it is none); a number compared with a FLOAT
    column, as a FLOAT (``f1 = 0.1`` matches the stored 0.1f).
    """
    if not any(kinds.get(c.name.lower()) in ("string", "float") for c in typed_operands(node)):
        return node
    typed = node.copy()
    for column in typed_operands(typed):
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
    return (isinstance(unit, exp.Literal) and unit.name.upper() in FLOOR_UNITS
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
        return spark_sql("_a DIV _b", _a=a, _b=b)
    return exp.Div(this=a.copy(), expression=b.copy())


def _unicode(text: str) -> str:
    r"""A Unicode string literal's text: ``\05E8`` and ``\+01F600`` are code points, ``\\`` a backslash."""
    return re.sub(r"\\(\\|\+[0-9A-Fa-f]{6}|[0-9A-Fa-f]{4})",
                  lambda m: "\\" if m.group(1) == "\\" else chr(int(m.group(1).lstrip("+"), 16)), text)
