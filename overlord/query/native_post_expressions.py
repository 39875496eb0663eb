"""Druid's ``expression`` post-aggregator: a Druid expression computed on a result row, in Python.

The expression is parsed by :mod:`specs.expressions` (the subset transforms take) and may read the
row's aggregators, dimensions and earlier post-aggregators only. Values are typed as Druid types
them: two whole numbers give a whole number (``/`` cut toward zero, ``%`` with the dividend's sign),
anything else with a number is DOUBLE; ``+`` with a string concatenates; comparisons and ``&& || !``
give 1 or 0 (1.0 or 0.0 comparing doubles); a null operand gives null. A division by zero or a
result JSON cannot hold (Infinity, NaN) is null. Time functions are refused (a 400).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from typing import Any

from overlord.query.native_checks import bad
from specs.expressions import Call, Expr, Field, Literal, parse_expression, referenced_fields
from specs.spec_errors import SpecError

__all__ = ["expression_post_aggregator"]

_Row = Mapping[str, Any]
_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne}
_REFUSED = {"timestamp_floor", "timestamp_parse", "timestamp_format", "like", "regexp_extract"}


def expression_post_aggregator(spec: Mapping[str, Any], names: set[str], path: str) -> Callable[[_Row], Any]:
    """The checked ``expression`` post-aggregator ``spec``: its value computed from a result row."""
    text = spec.get("expression")
    if not isinstance(text, str):
        raise bad(f"{path}.expression", f"expected an expression, got {text!r}")
    try:
        expr = parse_expression(text)
    except SpecError as exc:
        raise bad(f"{path}.expression", exc.errors[0][1]) from None
    unknown = [name for name in referenced_fields(expr) if name not in names]
    if unknown:
        raise bad(f"{path}.expression", f"{unknown[0]!r} is not an aggregator, dimension or earlier post-aggregator "
                                        f"of this query ({', '.join(sorted(names)) or 'none'})")
    refused = sorted(_functions(expr) & _REFUSED)
    if refused:
        raise bad(f"{path}.expression", f"function {refused[0]} is not supported in a post-aggregator")
    return lambda row: _finite(_evaluate(expr, row))


def _functions(expr: Expr) -> set[str]:
    if not isinstance(expr, Call):
        return set()
    return {expr.name}.union(*(_functions(arg) for arg in expr.args))


def _finite(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _evaluate(expr: Expr, row: _Row) -> Any:
    if isinstance(expr, Literal):
        return expr.value
    if isinstance(expr, Field):
        return row.get(expr.name)
    name = expr.name
    if name in ("&&", "||"):  # three-valued: false && null is false, true || null is true
        decisive = name == "||"
        sides = [_truth(_evaluate(expr.args[0], row))]
        if sides[0] is not decisive:
            sides.append(_truth(_evaluate(expr.args[1], row)))
        if decisive in sides:
            return int(decisive)
        return None if None in sides else int(not decisive)
    if name == "if":
        return _evaluate(expr.args[1] if _truth(_evaluate(expr.args[0], row)) else expr.args[2], row)
    if name == "case_searched":
        pairs = expr.args
        for i in range(0, len(pairs) - 1, 2):
            if _truth(_evaluate(pairs[i], row)):
                return _evaluate(pairs[i + 1], row)
        return _evaluate(pairs[-1], row) if len(pairs) % 2 else None
    if name == "case_simple":
        subject, pairs = _evaluate(expr.args[0], row), expr.args[1:]
        for i in range(0, len(pairs) - 1, 2):
            if subject is not None and subject == _evaluate(pairs[i], row):
                return _evaluate(pairs[i + 1], row)
        return _evaluate(pairs[-1], row) if len(pairs) % 2 else None
    return _apply(name, [_evaluate(arg, row) for arg in expr.args])


def _apply(name: str, values: list[Any]) -> Any:
    if name in ("isnull", "notnull"):
        return int((values[0] is None) == (name == "isnull"))
    if name == "nvl":
        return values[1] if values[0] is None else values[0]
    if name == "concat":
        return None if None in values else "".join(_text(v) for v in values)
    if None in values:
        return None
    if name in _COMPARE:
        a, b = values
        if not (isinstance(a, str) and isinstance(b, str)):
            a, b = _number(a), _number(b)
            if a is None or b is None:
                return None
        holds = _COMPARE[name](a, b)
        return float(holds) if isinstance(a, float) or isinstance(b, float) else int(holds)
    if name == "!":
        truth = _truth(values[0])
        return None if truth is None else int(not truth)
    if name in ("+", "-", "*", "/", "%", "^"):
        return _arithmetic(name, values[0], values[1])
    if name == "neg":
        value = _number(values[0])
        return None if value is None else -value
    if name == "abs":
        value = _number(values[0])
        return None if value is None else abs(value)
    return _string_function(name, values)


def _string_function(name: str, values: list[Any]) -> Any:
    text = _text(values[0])
    if name == "cast":
        target = str(values[1]).upper()
        if target == "STRING":
            return text
        number = _number(values[0])
        return None if number is None else (float(number) if target == "DOUBLE" else int(number))
    if name == "strlen":
        return len(text)
    if name in ("lower", "upper"):
        return text.lower() if name == "lower" else text.upper()
    if name == "substring":
        start, length = int(values[1]), int(values[2])
        return text[start:] if length < 0 else text[start:start + length]
    if name in ("trim", "ltrim", "rtrim"):
        return {"trim": str.strip, "ltrim": str.lstrip, "rtrim": str.rstrip}[name](text, " ")
    if name == "replace":
        return text.replace(_text(values[1]), _text(values[2]))
    raise bad("$.postAggregations", f"function {name} is not supported in a post-aggregator")


def _arithmetic(name: str, a: Any, b: Any) -> Any:
    if name == "+" and (isinstance(a, str) or isinstance(b, str)):
        return _text(a) + _text(b)
    x, y = _number(a), _number(b)
    if x is None or y is None:
        return None
    whole = isinstance(x, int) and isinstance(y, int)
    if name in ("/", "%") and y == 0:
        return None
    if name == "/":
        return int(x / y) if whole else x / y  # a whole division cut toward zero, as Java's
    if name == "%":
        return int(math.fmod(x, y)) if whole else math.fmod(x, y)
    if name == "^":
        result = x ** y if not whole or y >= 0 else float(x) ** y
        return int(result) if whole and y >= 0 else float(result)
    return {"+": operator.add, "-": operator.sub, "*": operator.mul}[name](x, y)


def _number(value: Any) -> int | float | None:
    """A value as a number: a whole number stays whole, text is read as a DOUBLE (null if it is not one)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float):
        return value
    try:
        return float(str(value))
    except ValueError:
        return None


def _truth(value: Any) -> bool | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.lower() == "true"
    return bool(value)


def _text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return repr(value)  # Java's 2.0, not 2
    return str(value)
