"""Druid's string functions that Spark lacks: STRING_FORMAT, PARSE_LONG and ICONTAINS_STRING.

Each takes the call's arguments (sqlglot expressions) and gives the Spark expression, or raises a
:class:`QueryError` naming what is not supported, as those of :mod:`overlord.query.druid_functions`.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable

from sqlglot import exp

from overlord.query.druid_functions import check_arity, integer_argument, spark_sql
from overlord.query.query_errors import QueryError

__all__ = ["STRING_FUNCTIONS"]

_CONVERSION = re.compile(r"%(?:\d+\$)?[-#+ 0,(<]*\d*(?:\.\d+)?([a-zA-Z%])")
_SAME_AS_JAVA = frozenset("sSdoxXeEfgGaAbB%n")
"""Java Formatter conversions whose text is the same for Spark's values as for Druid's (not ``%t``: a
time is a number of milliseconds in Druid; not ``%h``, ``%c``: hash codes and code points of Spark's values)."""


def _format_argument(value: exp.Expr) -> exp.Expr:
    """An argument as Druid gives it to ``String.format``: a time as its epoch milliseconds, a decimal as a double."""
    if (isinstance(value, exp.Column) and value.name == "__time") or (
            isinstance(value, exp.Cast) and value.to.is_type(*exp.DataType.TEMPORAL_TYPES)):
        return exp.Anonymous(this="unix_millis", expressions=[value.copy()])
    if isinstance(value, exp.Literal) and not value.is_string and not value.is_int:
        return exp.cast(value.copy(), "DOUBLE")
    return value.copy()


def _string_format(args: list[exp.Expr]) -> exp.Expr:
    """STRING_FORMAT(pattern, args...): Java's ``String.format``, as Spark's ``format_string`` is."""
    check_arity("STRING_FORMAT", args, 1, 256)
    pattern = args[0]
    if isinstance(pattern, exp.Literal) and pattern.is_string:
        for conversion in _CONVERSION.findall(str(pattern.this)):
            if conversion not in _SAME_AS_JAVA:
                raise QueryError(f"STRING_FORMAT: conversion '%{conversion}' is not supported; use one of "
                                 f"{', '.join('%' + c for c in sorted(_SAME_AS_JAVA))}", "UNSUPPORTED_DRUID_SQL")
    return exp.Anonymous(this="format_string", expressions=[pattern.copy(), *map(_format_argument, args[1:])])


_DIGITS = string.digits + string.ascii_lowercase


def _digits_of_long_max(radix: int) -> int:
    count, value = 0, 2**63 - 1
    while value:
        count, value = count + 1, value // radix
    return count


def _parse_long(args: list[exp.Expr]) -> exp.Expr:
    """PARSE_LONG(text[, radix]): Java's ``Long.parseLong``, NULL for what does not parse; hex may start ``0x``.

    The digits are read in two halves (``conv`` each, then ``try_multiply``/``try_add``), so that a
    value past a long is NULL rather than an overflow error.
    """
    check_arity("PARSE_LONG", args, 1, 2)
    radix = integer_argument(args, 1, "PARSE_LONG", "radix", 10, 2, 36)
    digits = f"0-{_DIGITS[min(radix, 10) - 1]}" + (f"a-{_DIGITS[radix - 1]}A-{_DIGITS[radix - 1].upper()}"
                                                   if radix > 10 else "")
    most = _digits_of_long_max(radix)
    low = (most + 1) // 2
    text = spark_sql("regexp_replace(_s, '^0[xX]', '')", _s=args[0]) if radix == 16 else args[0]
    body = spark_sql("regexp_replace(_t, '^[+-]?0*', '')", _t=text)
    value = (f"try_add(try_multiply(_sign * CAST(coalesce(conv(nullif(left(_b, length(_b) - {low}), ''), {radix}, "
             f"10), '0') AS BIGINT), CAST({radix ** low} AS BIGINT)), _sign * CAST(coalesce(conv(nullif(right(_b, "
             f"{low}), ''), {radix}, 10), '0') AS BIGINT))")
    return spark_sql(f"CASE WHEN _t RLIKE '^[+-]?[{digits}]+$' AND length(_b) <= {most} THEN {value} END", _t=text,
                     _b=body, _sign=spark_sql("CASE WHEN startswith(_t, '-') THEN -1 ELSE 1 END", _t=text))


def _icontains_string(args: list[exp.Expr]) -> exp.Expr:
    """ICONTAINS_STRING(text, search): CONTAINS_STRING ignoring case."""
    check_arity("ICONTAINS_STRING", args, 2, 2)
    return spark_sql("contains(lower(_a), lower(_b))", _a=args[0], _b=args[1])


STRING_FUNCTIONS: dict[str, Callable[[list[exp.Expr]], exp.Expr]] = {
    "STRING_FORMAT": _string_format, "PARSE_LONG": _parse_long, "ICONTAINS_STRING": _icontains_string,
}
"""Druid's string functions that Spark lacks, by name: arguments -> Spark SQL."""
