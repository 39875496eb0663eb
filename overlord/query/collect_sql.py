"""Druid's collecting aggregates, ``ARRAY_AGG``, ``STRING_AGG`` and ``LISTAGG``, as Spark's ``collect_list``/``_set``.

As Druid answers them (``CalciteArraysQueryTest#testArrayAgg*``, ``CalciteQueryTest#testStringAgg*``):

- without DISTINCT, values come in the rows' time order, Druid's scan order (over a datasource read
  directly; over a subquery or a join, in Spark's order); with DISTINCT, sorted;
- ``ARRAY_AGG`` keeps null values (DISTINCT: null first); ``STRING_AGG``/``LISTAGG`` skip them, and
  take numbers as text (DISTINCT: sorted as text);
- no rows (or, for ``STRING_AGG``, only nulls) give null; the separator must be a constant.

- ``__time`` is collected as its epoch milliseconds (Druid's long), a separator given as a number as its text;
- a collection past its ``maxBytes`` argument (1024 by default) fails the query, as in Druid
  (:mod:`overlord.query.collect_max_bytes`). The sandbox also bounds every collection by the rows the
  query may read (:mod:`overlord.query.sandbox`), and refuses one that could pass the value limit.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlglot import exp

from overlord.query.collect_max_bytes import array_estimate, max_bytes, rows_estimate, within_max_bytes
from overlord.query.druid_functions import spark_sql
from overlord.query.query_errors import QueryError

__all__ = ["COLLECTED_ARRAY", "collected_column", "collecting_aggregate"]

COLLECTED_ARRAY = "__collected_array"
"""The meta key marking an ARRAY_AGG's translation: an alias of it is an array, not a value to wrap in one."""

_STRING_AGGS = frozenset({"STRING_AGG", "LISTAGG"})
_ARRAY_TYPES = {"long": "ARRAY<LONG>", "float": "ARRAY<DOUBLE>", "double": "ARRAY<DOUBLE>",
                "string": "ARRAY<STRING?>"}
"""Druid's type of an ARRAY_AGG of a column of each kind (``?``: its null values are kept)."""


def _parts(node: exp.Expr) -> tuple[str, bool, list[exp.Expr]] | None:
    """(Druid name, DISTINCT, arguments) of a collecting aggregate call; None for any other node."""
    if isinstance(node, exp.ArrayAgg):
        name, this, rest = "ARRAY_AGG", node.this, []
    elif isinstance(node, exp.GroupConcat):
        name, this = "STRING_AGG", node.this
        rest = [a for a in (node.args.get("separator"), node.args.get("on_overflow")) if a is not None]
    elif isinstance(node, exp.Anonymous) and str(node.this).upper() in _STRING_AGGS | {"ARRAY_AGG"}:
        name, this, rest = str(node.this).upper(), None, list(node.expressions)
    else:
        return None
    distinct = isinstance(this, exp.Distinct)
    args = list(this.expressions) if isinstance(this, exp.Distinct) else ([this] if this is not None else [])
    return name, distinct, args + rest


def collected_column(node: exp.Expr) -> exp.Column | None:
    """The column a collecting aggregate collects, if a column: its kind (float, sketch, list) matters."""
    parts = _parts(node)
    value = parts[2][0] if parts is not None and parts[2] else None
    return value if isinstance(value, exp.Column) else None


def _reads_time(node: exp.Expr) -> bool:
    """Whether the query block of ``node`` reads one datasource directly (its ``__time`` orders the rows)."""
    select = node.find_ancestor(exp.Select)
    source = select.args.get("from_") if select is not None else None
    if select is None or source is None or not isinstance(source.this, exp.Table) or select.args.get("joins"):
        return False
    table = source.this
    if not isinstance(table.this, exp.Identifier):
        return False  # a table function: range(n)
    if table.args.get("db") is not None and table.args["db"].name.lower() != "druid":
        return False  # INFORMATION_SCHEMA, sys
    return table.name.lower() not in {cte.alias_or_name.lower() for cte in node.root().find_all(exp.CTE)}


def _collect(function: str, value: exp.Expr, where: exp.Expr | None) -> exp.Expr:
    call = exp.Anonymous(this=function, expressions=[value])
    return exp.Filter(this=call, expression=where.copy()) if where is not None else call


def collecting_aggregate(node: exp.Expr, kinds: Mapping[str, str]) -> exp.Expr | None:
    """``node`` (a collecting aggregate, or one under ``FILTER``) in Spark SQL; None for any other node.

    A call under ``FILTER`` is kept as it is (the ``FILTER`` node rewrites both). ``kinds``: the kinds of
    the columns queried (``translate``'s ``complex_columns``): a multi-value column's values are collected
    one by one, a FLOAT's text is its double's (``0.10000000149011612``), a sketch or first/last column is refused.
    """
    where = None
    if isinstance(node, exp.Filter) and _parts(node.this) is not None:
        where, call = node.expression, node.this
    elif _parts(node) is not None:
        if isinstance(node.parent, exp.Filter):
            return node
        call = node
    else:
        return None
    parts = _parts(call)
    assert parts is not None
    name, distinct, args = parts
    strings = name in _STRING_AGGS
    low, high = (1, 3) if strings else (1, 2)
    if not low <= len(args) <= high:
        raise QueryError(f"{name} takes {low} to {high} arguments, got {len(args)}", "UNSUPPORTED_DRUID_SQL")
    value = args[0]
    if isinstance(value, exp.Order) or isinstance(node.parent, exp.WithinGroup) or any(
            isinstance(a, exp.Order) for a in args):
        raise QueryError(f"{name} with an ORDER BY (or WITHIN GROUP) is not supported, as in Druid: without DISTINCT "
                         "values come in time order, with DISTINCT sorted", "UNSUPPORTED_DRUID_SQL")
    separator = args[1] if strings and len(args) > 1 else exp.Literal.string("")
    if list(separator.find_all(exp.Column)):
        raise QueryError(f"{name}: the separator must be a constant", "UNSUPPORTED_DRUID_SQL")
    separator = exp.cast(separator, "STRING") if not (isinstance(separator, exp.Literal) and separator.is_string) \
        else separator
    limit = max_bytes(name, args[-1] if len(args) == high else None)
    kind = kinds.get(value.name.lower()) if isinstance(value, exp.Column) else None
    if isinstance(value, exp.Column) and value.name.lower() == "__time":
        value, kind = exp.Anonymous(this="unix_millis", expressions=[value.copy()]), "long"
    if kind is not None and kind not in ("string", "float", "double", "long", "multi_value"):
        raise QueryError(f"{name} does not take a sketch or first/last column", "UNSUPPORTED_DRUID_SQL")
    if kind == "multi_value":
        if strings:
            raise QueryError(f"{name} over a multi-value column is not supported: use ARRAY_AGG",
                             "UNSUPPORTED_DRUID_SQL")
        translated = _collect_values(value, distinct, _reads_time(node), where, limit)
        translated.meta[COLLECTED_ARRAY] = True
        return translated
    timed = not distinct and _reads_time(node)
    if strings:
        value = exp.cast(exp.cast(value, "DOUBLE") if kind == "float" else value, "STRING")  # sorted as text
        kept = spark_sql("IF(_x IS NULL, NULL, named_struct('t', __time, 'v', _x))" if timed else
                         "IF(_x IS NULL, NULL, named_struct('v', _x))", _x=value)
    else:
        kept = spark_sql("named_struct('t', __time, 'v', _x)" if timed else "named_struct('v', _x)", _x=value)
    collected = _collect("collect_set" if distinct else "collect_list", kept, where)
    ordered = spark_sql("sort_array(_c)" if distinct or timed else "_c", _c=collected)
    values = spark_sql("(_o).v", _o=ordered)  # a field of an array of structs: the array of its values
    if distinct and not strings:
        values = spark_sql("sort_array((_c).v)", _c=collected)
    result = spark_sql("array_join(_v, _s)", _v=values, _s=separator) if strings else values
    druid_type = "ARRAY<STRING>" if strings else _ARRAY_TYPES.get(kind or "")
    size, label = array_estimate(spark_sql("(_c).v", _c=collected), druid_type) if distinct else \
        rows_estimate(value, where, druid_type)
    translated = within_max_bytes(size, label, limit, spark_sql("IF(size(_c) = 0, NULL, _r)", _c=collected,
                                                                _r=result))
    translated.meta[COLLECTED_ARRAY] = not strings
    return translated


def _collect_values(column: exp.Expr, distinct: bool, timed: bool, where: exp.Expr | None, limit: int) -> exp.Expr:
    """ARRAY_AGG of a multi-value column: its rows' values one by one (a row without values: null), as Druid's."""
    values = spark_sql("IF(_x IS NULL OR size(_x) = 0, array(CAST(NULL AS STRING)), _x)", _x=column)
    kept = spark_sql("named_struct('t', __time, 'v', _x)" if timed and not distinct else "named_struct('v', _x)",
                     _x=values)
    collected = _collect("collect_list", kept, where)
    flat = spark_sql("flatten((sort_array(_c)).v)" if timed and not distinct else "flatten((_c).v)", _c=collected)
    elements = spark_sql("array_distinct(flatten((_c).v))" if distinct else "flatten((_c).v)", _c=collected)
    if distinct:
        flat = spark_sql("sort_array(array_distinct(_f))", _f=flat)
    size, label = array_estimate(elements, "ARRAY<STRING?>")
    return within_max_bytes(size, label, limit, spark_sql("IF(size(_c) = 0, NULL, _r)", _c=collected, _r=flat))
