"""Druid expressions in native queries: ``virtualColumns`` and aggregators' ``expression``, as Druid SQL.

An expression (parsed by :mod:`specs.expressions`, so the same subset as transforms) becomes one
Druid SQL expression, typed as Druid types it from the datasource's columns: ``+`` with a string
operand concatenates, ``/`` of two LONGs is a whole division, comparisons and ``&& || !`` give
1 or 0 (null with a null operand), ``__time`` is milliseconds, a missing column is null. A
virtual column may read another; a cycle is refused. Each virtual column's name is replaced by
its expression in the query's syntax tree, so every part of the query (filters, dimensions,
aggregators, scan columns) reads it as Druid does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from sqlglot import exp

from overlord.query.native_checks import bad
from specs.expressions import Call, Expr, Field, Literal, parse_expression, referenced_fields
from specs.spec_errors import SpecError

__all__ = ["VirtualColumns"]

_OUTPUT_TYPES = {"LONG": "BIGINT", "DOUBLE": "DOUBLE", "FLOAT": "FLOAT", "STRING": "VARCHAR"}
_SQL_TYPES = {"LONG": "BIGINT", "DOUBLE": "DOUBLE", "STRING": "VARCHAR"}
_COMPARE = {"<": exp.LT, "<=": exp.LTE, ">": exp.GT, ">=": exp.GTE, "==": exp.EQ, "!=": exp.NEQ}
_ARITHMETIC = {"+": exp.Add, "-": exp.Sub, "*": exp.Mul, "/": exp.Div, "%": exp.Mod}
_Typed = tuple[exp.Expr, str | None]
"""A SQL expression and its Druid type (LONG, DOUBLE, STRING; None: a null literal)."""


@dataclass(frozen=True)
class _Virtual:
    """One expression column: its parsed expression and the type Druid casts it to (None: as computed)."""

    expression: Expr
    output_type: str | None
    path: str


class VirtualColumns:
    """A query's expression columns, checked when the query is read and bound to the datasource's types to run."""

    def __init__(self) -> None:
        self.columns: dict[str, _Virtual] = {}

    def __bool__(self) -> bool:
        return bool(self.columns)

    def read(self, specs: Any, path: str) -> None:
        """Check the ``virtualColumns`` list; 400 naming the path of anything unsupported."""
        if not isinstance(specs, list):
            raise bad(path, f"expected a list of virtual columns, got {specs!r}")
        for i, spec in enumerate(specs):
            where = f"{path}[{i}]"
            if not isinstance(spec, Mapping) or spec.get("type") != "expression":
                raise bad(f"{where}.type", "only expression virtual columns are supported")
            unknown = sorted(set(spec) - {"type", "name", "expression", "outputType"})
            if unknown:
                raise bad(f"{where}.{unknown[0]}", "not supported in a virtual column here")
            name = spec.get("name")
            if not isinstance(name, str) or not name or name == "__time" or name in self.columns:
                raise bad(f"{where}.name", f"expected a new column name other than __time, got {name!r}")
            output = spec.get("outputType")
            if output is not None and str(output).upper() not in _OUTPUT_TYPES:
                raise bad(f"{where}.outputType", f"{output!r} is not one of {', '.join(_OUTPUT_TYPES)}")
            self.add(name, spec.get("expression"), f"{where}.expression", output and str(output).upper())

    def add(self, name: str, text: Any, path: str, output_type: str | None = None) -> None:
        """One expression column (an aggregator's ``expression`` is one too)."""
        if not isinstance(text, str):
            raise bad(path, f"expected an expression, got {text!r}")
        try:
            self.columns[name] = _Virtual(parse_expression(text), output_type, path)
        except SpecError as exc:
            raise bad(path, exc.errors[0][1]) from None

    def bind(self, schema: pa.Schema, multi_value: set[str]) -> Callable[[exp.Expr], exp.Expr]:
        """A rewrite of a query's tree reading each virtual column's expression over ``schema``'s columns.

        An expression reading a ``multi_value`` column is refused: Druid maps it over each value and
        unnests the results, which this translation does not.
        """
        for virtual in self.columns.values():
            lists = [name for name in referenced_fields(virtual.expression) if name in multi_value]
            if lists:
                raise bad(virtual.path, f"an expression over the multi-value dimension {lists[0]!r} is not supported")
        types = {f.name: _druid_type(f.type) for f in schema}
        bound: dict[str, _Typed] = {}

        def column(name: str, visiting: tuple[str, ...]) -> _Typed:
            if name in bound:
                return bound[name][0].copy(), bound[name][1]
            if name in self.columns:
                if name in visiting:
                    raise bad("$.virtualColumns", f"the virtual columns {' -> '.join((*visiting, name))} read "
                                                  "each other in a cycle")
                virtual = self.columns[name]
                value, kind = _Translation(lambda n: column(n, (*visiting, name))).typed(virtual.expression)
                if virtual.output_type is not None:
                    value = exp.cast(value, _OUTPUT_TYPES[virtual.output_type])
                    kind = {"FLOAT": "DOUBLE"}.get(virtual.output_type, virtual.output_type)
                bound[name] = (value, kind)
                return value.copy(), kind
            if name == "__time":
                return exp.Anonymous(this="TIMESTAMP_TO_MILLIS", expressions=[_col(name)]), "LONG"
            if name not in types:
                return exp.Null(), None  # a missing column is null, as in Druid
            return _col(name), types[name]

        for name in self.columns:
            column(name, ())

        def rewrite(node: exp.Expr) -> exp.Expr:
            if isinstance(node, exp.Column) and not node.table and node.name in bound:
                return exp.paren(bound[node.name][0].copy())
            return node
        return lambda tree: tree.transform(rewrite)


def _col(name: str) -> exp.Column:
    return exp.column(name, quoted=True)


def _druid_type(kind: pa.DataType) -> str:
    if pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        return "LONG"
    if pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        return "DOUBLE"
    return "STRING"


class _Translation:
    """One expression's translation; ``column`` gives a field's SQL and type."""

    def __init__(self, column: Callable[[str], _Typed]) -> None:
        self.column = column

    def typed(self, node: Expr) -> _Typed:
        if isinstance(node, Literal):
            value = node.value
            if value is None:
                return exp.Null(), None
            if isinstance(value, str):
                return exp.Literal.string(value), "STRING"
            return exp.Literal.number(value), "LONG" if isinstance(value, int) else "DOUBLE"
        if isinstance(node, Field):
            return self.column(node.name)
        return self.call(node)

    def call(self, node: Call) -> _Typed:
        name, args = node.name, [self.typed(a) for a in node.args]
        if name in _ARITHMETIC or name == "^":
            return _arithmetic(name, args[0], args[1])
        if name in _COMPARE:
            (a, ka), (b, kb) = args
            if "STRING" not in (ka, kb) or None in (ka, kb):
                a, b = _number(a, ka), _number(b, kb)
            return _flag(_COMPARE[name](this=a, expression=b)), "LONG"
        if name in ("&&", "||"):
            join = exp.and_ if name == "&&" else exp.or_
            return _flag(join(_truth(*args[0]), _truth(*args[1]))), "LONG"
        if name == "!":
            return _flag(exp.not_(_truth(*args[0]))), "LONG"
        if name == "neg":
            return exp.Neg(this=exp.paren(_number(*args[0]))), args[0][1] or "LONG"
        return self.function(name, node.args, args)

    def function(self, name: str, raw: tuple[Expr, ...], args: list[_Typed]) -> _Typed:
        values = [value for value, _ in args]
        text = [_text(value, kind) for value, kind in args]
        if name == "concat":
            return exp.Concat(expressions=text), "STRING"
        if name in ("lower", "upper"):
            return (exp.Lower if name == "lower" else exp.Upper)(this=text[0]), "STRING"
        if name == "strlen":
            return exp.Length(this=text[0]), "LONG"
        if name == "substring":  # substring(s, index from 0, length; negative: the rest)
            start, length = (a.value if isinstance(a, Literal) else 0 for a in raw[1:])
            return exp.Substring(this=text[0], start=exp.Literal.number(int(start or 0) + 1), length=(
                exp.Literal.number(length) if isinstance(length, int) and length >= 0 else None)), "STRING"
        if name in ("trim", "ltrim", "rtrim"):
            position = {"trim": "BOTH", "ltrim": "LEADING", "rtrim": "TRAILING"}[name]
            return exp.Trim(this=text[0], position=position), "STRING"
        if name == "replace":
            return exp.Anonymous(this="REPLACE", expressions=text), "STRING"
        if name == "nvl":
            return exp.Coalesce(this=values[0], expressions=[values[1]]), args[0][1] or args[1][1]
        if name == "if":
            return exp.If(this=_truth(*args[0]), true=values[1], false=values[2]), args[1][1] or args[2][1]
        if name in ("case_searched", "case_simple"):
            return _case(name, args)
        if name == "like":
            return _flag(exp.Like(this=text[0], expression=values[1])), "LONG"
        if name == "regexp_extract":
            group = values[2] if len(values) > 2 else exp.Literal.number(0)
            return exp.RegexpExtract(this=text[0], expression=values[1], group=group), "STRING"
        if name in ("isnull", "notnull"):
            null = exp.Is(this=values[0], expression=exp.Null())
            return _flag(null if name == "isnull" else exp.not_(null)), "LONG"
        if name == "abs":
            return exp.Abs(this=_number(*args[0])), args[0][1] or "LONG"
        if name == "cast":
            target = str(raw[1].value if isinstance(raw[1], Literal) else "").upper()
            return exp.cast(values[0], _SQL_TYPES[target]), target
        millis = exp.Anonymous(this="MILLIS_TO_TIMESTAMP", expressions=[exp.cast(values[0], "BIGINT")])
        if name == "timestamp_floor":
            floor = exp.Anonymous(this="TIME_FLOOR", expressions=[millis, values[1]])
            return exp.Anonymous(this="TIMESTAMP_TO_MILLIS", expressions=[floor]), "LONG"
        if name == "timestamp_format":
            return exp.Anonymous(this="TIME_FORMAT", expressions=[millis]), "STRING"
        if name == "timestamp_parse":
            parsed = exp.Anonymous(this="TIME_PARSE", expressions=[text[0], *values[1:]])
            return exp.Anonymous(this="TIMESTAMP_TO_MILLIS", expressions=[parsed]), "LONG"
        raise bad("$", f"function {name} is not supported in a native query's expression")


def _case(name: str, args: list[_Typed]) -> _Typed:
    """``case_searched(c1, v1, ..., [else])`` and ``case_simple(x, w1, v1, ..., [else])``."""
    subject = args[0] if name == "case_simple" else None
    rest = args[1:] if subject else args
    case, kinds = exp.Case(), []
    for i in range(0, len(rest) - 1, 2):
        (when, kind), (then, then_kind) = rest[i], rest[i + 1]
        condition = (_truth(when, kind) if subject is None
                     else exp.EQ(this=_text(*subject), expression=_text(when, kind)))
        case = case.when(condition, then)
        kinds.append(then_kind)
    if len(rest) % 2:
        case = case.else_(rest[-1][0])
        kinds.append(rest[-1][1])
    return case, next((k for k in kinds if k), None)


def _arithmetic(name: str, left: _Typed, right: _Typed) -> _Typed:
    (a, ka), (b, kb) = left, right
    if name == "+" and "STRING" in (ka, kb):
        return exp.Concat(expressions=[_text(a, ka), _text(b, kb)]), "STRING"
    whole = ka == kb == "LONG"
    a, b = _number(a, ka), _number(b, kb)
    if name == "^":
        power = exp.Pow(this=a, expression=b)
        return (exp.cast(power, "BIGINT"), "LONG") if whole else (power, "DOUBLE")
    result: exp.Expr = _ARITHMETIC[name](this=exp.paren(a), expression=exp.paren(b))
    if name == "/" and whole:
        result = exp.cast(result, "BIGINT")  # a whole division, cut toward zero
    return result, "LONG" if whole else "DOUBLE"


def _number(value: exp.Expr, kind: str | None) -> exp.Expr:
    return exp.cast(value, "DOUBLE") if kind == "STRING" else value


def _text(value: exp.Expr, kind: str | None) -> exp.Expr:
    return value if kind == "STRING" else exp.cast(value, "VARCHAR")


def _truth(value: exp.Expr, kind: str | None) -> exp.Expr:
    """Druid's truth of a value: a number not zero, the text 'true' (any case)."""
    if kind == "STRING":
        return exp.EQ(this=exp.Lower(this=value), expression=exp.Literal.string("true"))
    return exp.NEQ(this=exp.paren(value), expression=exp.Literal.number(0))


def _flag(condition: exp.Expr) -> exp.Expr:
    """1 where ``condition`` holds, 0 where it does not, null where it is null."""
    return exp.Case().when(condition, exp.Literal.number(1)).when(
        exp.not_(exp.paren(condition.copy())), exp.Literal.number(0))
