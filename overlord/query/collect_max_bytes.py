"""Druid's ``maxBytes`` of ARRAY_AGG, STRING_AGG and LISTAGG: a collection past it fails the query.

Druid estimates the bytes of a collecting aggregate's accumulated array as it grows and fails the query
once the estimate passes ``maxBytes`` (1024 by default; ``ExpressionLambdaAggregator.estimateAndCheckMaxBytes``):

- an array of texts (ARRAY_AGG of strings; STRING_AGG's accumulator holds its non-null values as texts):
  5 + 4 per element + the elements' UTF-8 bytes;
- an array of numbers (longs, doubles, ``__time``): 5 + 1 per element + 8 per non-null element
  (``ExpressionLambdaAggregatorTest#testEstimateLongArrayTooBig``: four longs are 41 bytes).

The estimate only grows, so the final array's is the largest Druid checked. Here the final array is
measured in Spark and a query whose estimate passes the limit fails with Druid's message (without the
estimate: writing it out would double the expression the sandbox walks), raised by
``raise_error`` with a message starting with :data:`MAX_BYTES_MESSAGE` (the only ``raise_error`` the
sandbox lets through, :mod:`overlord.query.sandbox`), and answered as a 400.
"""

from __future__ import annotations

from sqlglot import exp

from overlord.query.druid_functions import spark_sql
from overlord.query.query_errors import QueryError

__all__ = ["DEFAULT_MAX_BYTES", "MAX_BYTES_MESSAGE", "array_estimate", "max_bytes", "rows_estimate",
           "within_max_bytes"]

DEFAULT_MAX_BYTES = 1024
"""Druid's ``maxBytes`` when a collecting aggregate is not given one."""

MAX_BYTES_MESSAGE = "Unable to serialize ["
"""How the error of a collection past its ``maxBytes`` starts (Druid's text)."""

_TEXTS = "9 + octet_length(array_join(_v, '1234', ''))"
"""5 + 4 per element + the elements' bytes: a separator (one fewer than the elements) stands for 4 (none: 9)."""
_NUMBERS = "5 + size(_v) + 8 * size(array_compact(_v))"
_TEXT_ROW = "4 + coalesce(octet_length(CAST(_x AS STRING)), 0)"
_NUMBER_ROW = "IF(_x IS NULL, 1, 9)"
_TYPE = ("IF(typeof(_x) = 'string', 'ARRAY<STRING>', "
         "IF(typeof(_x) IN ('double', 'float'), 'ARRAY<DOUBLE>', 'ARRAY<LONG>'))")


def max_bytes(name: str, arg: exp.Expr | None) -> int:
    """The ``maxBytes`` argument of ``name`` (a positive integer literal, as Druid requires), or the default."""
    if arg is None:
        return DEFAULT_MAX_BYTES
    if not (isinstance(arg, exp.Literal) and arg.is_int and int(arg.this) > 0):
        raise QueryError(f"{name}: the size in bytes must be a positive integer literal, got {arg.sql()}",
                         "UNSUPPORTED_DRUID_SQL")
    return int(arg.this)


def rows_estimate(value: exp.Expr, where: exp.Expr | None, druid_type: str | None) -> tuple[exp.Expr, exp.Expr]:
    """(the estimate, Druid's type) of collecting every row's ``value`` (those ``where`` holds), as a sum over rows.

    ``druid_type``: ``ARRAY<STRING>`` (null values skipped: STRING_AGG's), ``ARRAY<STRING?>`` (kept), ``ARRAY<LONG>``,
    ``ARRAY<DOUBLE>``; None when the query does not say (an expression): Spark's type of ``value`` tells.
    """
    if druid_type is None:
        row = spark_sql(f"IF(typeof(_x) = 'string', {_TEXT_ROW}, {_NUMBER_ROW})", _x=value)
    elif druid_type == "ARRAY<STRING>":
        row = spark_sql("4 + octet_length(_x)", _x=value)
    else:
        row = spark_sql(_TEXT_ROW if druid_type == "ARRAY<STRING?>" else _NUMBER_ROW, _x=value)
    total = exp.Anonymous(this="sum", expressions=[row])
    summed = exp.Filter(this=total, expression=where.copy()) if where is not None else total
    label = spark_sql(f"min({_TYPE})", _x=value) if druid_type is None else exp.Literal.string(druid_type.rstrip("?"))
    return spark_sql("5 + _s", _s=summed), label


def array_estimate(elements: exp.Expr, druid_type: str | None) -> tuple[exp.Expr, exp.Expr]:
    """(the estimate, Druid's type) of the collected array ``elements`` (a DISTINCT's: Druid's is of its set).

    ``druid_type`` as :func:`rows_estimate`'s.
    """
    if druid_type is None:
        return (spark_sql(f"IF(typeof(_v) = 'array<string>', {_TEXTS}, {_NUMBERS})", _v=elements),
                spark_sql(_TYPE, _x=spark_sql("element_at(_v, 1)", _v=elements)))
    return (spark_sql(_TEXTS if druid_type.startswith("ARRAY<STRING") else _NUMBERS, _v=elements),
            exp.Literal.string(druid_type.rstrip("?")))


def within_max_bytes(size: exp.Expr, druid_type: exp.Expr, limit: int, result: exp.Expr) -> exp.Expr:
    """``result``, or Druid's error when the estimate ``size`` of the collection is past ``limit`` bytes."""
    error = spark_sql(f"raise_error(concat('{MAX_BYTES_MESSAGE}', _t, '], its estimated size is larger than max "
                      f"[{limit}] (maxBytes)'))", _t=druid_type)
    return spark_sql(f"IF(_s > {limit}, _e, _r)", _s=size, _e=error, _r=result)
