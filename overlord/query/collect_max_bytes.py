"""Druid's ``maxBytes`` of ARRAY_AGG, STRING_AGG and LISTAGG: a collection past it fails the query.

Druid estimates the bytes of a collecting aggregate's accumulated array as it grows and fails the query
once the estimate passes ``maxBytes`` (1024 by default; ``ExpressionLambdaAggregator.estimateAndCheckMaxBytes``):

- an array of texts (ARRAY_AGG of strings; STRING_AGG's accumulator holds its non-null values as texts):
  5 + 4 per element + the elements' UTF-8 bytes;
- an array of numbers (longs, doubles, ``__time``): 5 + 1 per element + 8 per non-null element
  (``ExpressionLambdaAggregatorTest#testEstimateLongArrayTooBig``: four longs are 41 bytes).

The estimate only grows, so the final array's is the largest Druid checked. Here the final array is
measured in Spark and a query whose estimate passes the limit fails with Druid's message, raised by
``raise_error`` with a message starting with :data:`MAX_BYTES_MESSAGE` (the only ``raise_error`` the
sandbox lets through, :mod:`overlord.query.sandbox`), and answered as a 400.
"""

from __future__ import annotations

from sqlglot import exp

from overlord.query.druid_functions import spark_sql
from overlord.query.query_errors import QueryError

__all__ = ["DEFAULT_MAX_BYTES", "MAX_BYTES_MESSAGE", "max_bytes", "within_max_bytes"]

DEFAULT_MAX_BYTES = 1024
"""Druid's ``maxBytes`` when a collecting aggregate is not given one."""

MAX_BYTES_MESSAGE = "Unable to serialize ["
"""How the error of a collection past its ``maxBytes`` starts (Druid's text)."""

_TEXTS = "5 + 4 * size(_v) + octet_length(array_join(_v, ''))"
_NUMBERS = "5 + size(_v) + 8 * size(array_compact(_v))"


def max_bytes(name: str, arg: exp.Expr | None) -> int:
    """The ``maxBytes`` argument of ``name`` (a positive integer literal, as Druid requires), or the default."""
    if arg is None:
        return DEFAULT_MAX_BYTES
    if not (isinstance(arg, exp.Literal) and arg.is_int and int(arg.this) > 0):
        raise QueryError(f"{name}: the size in bytes must be a positive integer literal, got {arg.sql()}",
                         "UNSUPPORTED_DRUID_SQL")
    return int(arg.this)


def within_max_bytes(values: exp.Expr, limit: int, result: exp.Expr, druid_type: str | None) -> exp.Expr:
    """``result``, or Druid's error when the accumulated array ``values`` is estimated past ``limit`` bytes.

    ``druid_type``: Druid's type of ``values`` (``ARRAY<STRING>``, ``ARRAY<LONG>``, ``ARRAY<DOUBLE>``); None when
    the query does not say (an expression's values), then Spark's type of ``values`` tells.
    """
    if druid_type is None:
        size = spark_sql(f"IF(typeof(_v) = 'array<string>', {_TEXTS}, {_NUMBERS})", _v=values)
    else:
        size = spark_sql(_TEXTS if druid_type == "ARRAY<STRING>" else _NUMBERS, _v=values)
    error = spark_sql(f"raise_error(concat('{MAX_BYTES_MESSAGE}', _t, '], size [', CAST(_s AS STRING), "
                      f"'] is larger than max [{limit}]'))", _s=size,
                      _t=exp.Literal.string(druid_type) if druid_type is not None else spark_sql(
                          "IF(typeof(_v) = 'array<string>', 'ARRAY<STRING>', IF(typeof(_v) IN "
                          "('array<double>', 'array<float>'), 'ARRAY<DOUBLE>', 'ARRAY<LONG>'))", _v=values))
    return spark_sql(f"IF(_s > {limit}, _e, _r)", _s=size, _e=error, _r=result)
