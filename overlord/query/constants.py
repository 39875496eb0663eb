"""Constant arithmetic that reaches Infinity or NaN, answered as Druid's planner answers it.

Druid reduces constant expressions while planning. A constant that ends as Infinity or NaN is an
error (``LOG10(0)``: "evaluates to an unsupported value [-Infinity]"); one that passes through
them to a number (``CAST(1 / 0.0 AS BIGINT)``: Long.MAX, NaN as 0) is that number. Spark would
raise DIVIDE_BY_ZERO or give NULL for both, so :func:`check_constants` answers them before. Other
constants are left to Spark: they have no infinity on the way and Spark computes them as Druid.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from sqlglot import exp

from overlord.query.query_errors import QueryError

__all__ = ["check_constants"]

_LONG_MIN, _LONG_MAX = -(2 ** 63), 2 ** 63 - 1


def _log(x: float, log: Callable[[float], float]) -> float:
    return -math.inf if x == 0 else math.nan if x < 0 else log(x)


def _divide(a: float, b: float) -> float:
    if b == 0:  # IEEE division, as Druid's doubles divide (-0.0 counts as 0.0, as in Druid's answers)
        return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a)
    return a / b


def _odd(b: float) -> bool:
    return b.is_integer() and b % 2 == 1


def _power(a: float, b: float) -> float:
    """Java's ``Math.pow`` (Druid's ``pow``), where Python's differs or raises."""
    if math.isnan(b) or (abs(a) == 1 and math.isinf(b)):
        return math.nan
    try:
        return math.pow(a, b)
    except OverflowError:
        return -math.inf if a < 0 and _odd(b) else math.inf
    except ValueError:  # zero to a negative power, or a negative number to a fractional one
        if a == 0:
            return math.copysign(math.inf, a) if _odd(b) else math.inf
        return math.nan


def _wrapped(value: int) -> int:
    """``value`` as a Java long: BIGINT arithmetic wraps around."""
    return (value - _LONG_MIN) % 2 ** 64 + _LONG_MIN


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _long(x: float) -> int:
    """A double cast to BIGINT as Java's (long) cast: clamped, NaN as 0."""
    return 0 if math.isnan(x) else max(_LONG_MIN, min(_LONG_MAX, int(x) if math.isfinite(x) else (
        _LONG_MAX if x > 0 else _LONG_MIN)))


class _NotConstant(Exception):
    """The expression is not constant arithmetic this module evaluates."""


def _computed(node: exp.Expr, value: Callable[[exp.Expr | None], float | int]) -> float | int:
    """The value of constant arithmetic ``node`` (a float once a double is in it), from its operands' ``value``."""
    if isinstance(node, exp.Literal) and not node.is_string:
        text = str(node.this)
        if any(c in text for c in ".eE"):
            return float(text)
        if len(text) > 19 or int(text) > _LONG_MAX:  # a DECIMAL (past Python's int parsing, perhaps): Spark's
            raise _NotConstant
        return int(text)
    if isinstance(node, exp.Paren):
        return value(node.this)
    if isinstance(node, exp.Neg):
        operand = value(node.this)
        return _wrapped(-operand) if isinstance(operand, int) else -operand
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div)):
        a, b = value(node.this), value(node.expression)
        if isinstance(node, exp.Div):
            if not (isinstance(a, float) or isinstance(b, float)):
                raise _NotConstant  # whole-number division: Spark's (and the translation's) to compute
            return _divide(a, b)
        if isinstance(a, float) or isinstance(b, float):
            a, b = float(a), float(b)
        result = a + b if isinstance(node, exp.Add) else a - b if isinstance(node, exp.Sub) else a * b
        return _wrapped(result) if isinstance(result, int) else result
    if isinstance(node, exp.Ln):
        return _log(float(value(node.this)), math.log)
    if isinstance(node, exp.Log) and node.expression is not None and node.this == exp.Literal.number(10):
        return _log(float(value(node.expression)), math.log10)  # LOG10(x)
    if isinstance(node, exp.Exp):
        return _exp(float(value(node.this)))
    if isinstance(node, exp.Sqrt):
        x = float(value(node.this))
        return math.nan if x < 0 else math.sqrt(x)
    if isinstance(node, exp.Pow):
        return _power(float(value(node.this)), float(value(node.expression)))
    if isinstance(node, exp.Cast) and node.to.this in (exp.DataType.Type.BIGINT, exp.DataType.Type.INT):
        operand = value(node.this)
        return _long(operand) if isinstance(operand, float) else operand
    raise _NotConstant


def _non_finite(value: float | int) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def check_constants(tree: exp.Expr) -> bool:
    """Answer, in place, constants of ``tree`` that pass through Infinity or NaN; whether any was replaced.

    One pass up the tree computes each node's value from its operands', one down finds the largest
    constants (linear in the tree's size, however deep).
    """
    values: dict[int, float | int] = {}
    through: set[int] = set()  # the constants with Infinity or NaN in them

    def value(node: exp.Expr | None) -> float | int:
        if node is None or id(node) not in values:
            raise _NotConstant
        return values[id(node)]

    for node in reversed(list(tree.walk(bfs=False))):  # operands first
        try:
            values[id(node)] = _computed(node, value)
        except (_NotConstant, ArithmeticError, ValueError):  # (a float past a double's range: Spark's to refuse)
            continue
        if _non_finite(values[id(node)]) or any(id(child) in through for child in node.iter_expressions()):
            through.add(id(node))
    replaced, pending = False, [tree]
    while pending:
        node = pending.pop()
        if id(node) not in values or isinstance(node, exp.Literal):
            pending.extend(node.iter_expressions())
        elif _non_finite(values[id(node)]):
            word = "NaN" if math.isnan(values[id(node)]) else "Infinity" if values[id(node)] > 0 else "-Infinity"
            raise QueryError(f"Expression [{node.sql(dialect='druid')}] evaluates to an unsupported value [{word}], "
                             "expected something that can be a Double", "UNSUPPORTED_DRUID_SQL")
        elif id(node) in through:
            number = values[id(node)]
            node.replace(exp.cast(exp.Literal.number(number), "BIGINT" if isinstance(number, int) else "DOUBLE"))
            replaced = True
    return replaced
