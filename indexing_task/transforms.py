"""Druid expressions (:mod:`specs.expressions`) compiled to DuckDB SQL for the bulk parse pass.

A value is carried as its JSON text, so its Druid type travels with it: a string is quoted
(``"5"``), a LONG is an integer (``5``), a DOUBLE has a point or exponent (``5.0``), null is
NULL. Input fields are read as JSON tokens (``json_extract``), so a record's ``"5"`` stays a
string and its ``5`` a number, as in Druid. The rules, one macro each (:data:`MACROS`):

* ``+ - * / % ^`` on two LONGs give a LONG (``/`` truncates; dividing by zero or overflowing
  gives null), ``+`` on two strings concatenates, and anything else is DOUBLE arithmetic (a
  string read as a number, null if it is not one). Any null operand gives null.
* ``< <= > >= == !=`` compare two strings as strings and anything else as numbers, giving 1 or
  0 (null with a null operand); ``&& || !`` and the conditions of ``if`` and the ``case_``
  functions take numbers as true when non-zero and strings when ``'true'``.
* Numbers are written as DuckDB writes them (``1e+20`` where Java writes ``1.0E20``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import duckdb

from indexing_task.buckets import bucket_start_sql
from indexing_task.sql_text import quote_string
from specs.expressions import Expr, Field, Literal, joda_to_strptime
from specs.granularity import Granularity

__all__ = ["MACROS", "compile_expression", "create_macros"]

MACROS: dict[str, tuple[str, str]] = {
    "d_isstr": ("v", "left(v, 1) = '\"'"),
    "d_str": ("v", "CASE WHEN d_isstr(v) THEN json_extract_string(v, '$') ELSE v END"),
    "d_quote": ("s", "to_json(s)::VARCHAR"),
    "d_islong": ("v", "NOT d_isstr(v) AND try_cast(v AS BIGINT) IS NOT NULL "
                      "AND NOT (contains(v, '.') OR contains(v, 'e') OR contains(v, 'E'))"),
    "d_num": ("v", "try_cast(d_str(v) AS DOUBLE)"),
    "d_add": ("a, b", "CASE WHEN d_isstr(a) AND d_isstr(b) THEN d_quote(d_str(a) || d_str(b)) "
                      "WHEN d_islong(a) AND d_islong(b) THEN try(a::BIGINT + b::BIGINT)::VARCHAR "
                      "ELSE (d_num(a) + d_num(b))::VARCHAR END"),
    "d_sub": ("a, b", "CASE WHEN d_islong(a) AND d_islong(b) THEN try(a::BIGINT - b::BIGINT)::VARCHAR "
                      "ELSE (d_num(a) - d_num(b))::VARCHAR END"),
    "d_mul": ("a, b", "CASE WHEN d_islong(a) AND d_islong(b) THEN try(a::BIGINT * b::BIGINT)::VARCHAR "
                      "ELSE (d_num(a) * d_num(b))::VARCHAR END"),
    "d_div": ("a, b", "CASE WHEN d_islong(a) AND d_islong(b) THEN try(a::BIGINT // b::BIGINT)::VARCHAR "
                      "ELSE (d_num(a) / d_num(b))::VARCHAR END"),
    "d_mod": ("a, b", "CASE WHEN d_islong(a) AND d_islong(b) THEN try(a::BIGINT % b::BIGINT)::VARCHAR "
                      "ELSE fmod(d_num(a), d_num(b))::VARCHAR END"),
    "d_pow": ("a, b", "CASE WHEN d_islong(a) AND d_islong(b) AND b::BIGINT >= 0 "
                      "THEN try(round(pow(a::BIGINT, b::BIGINT))::BIGINT)::VARCHAR "
                      "ELSE pow(d_num(a), d_num(b))::VARCHAR END"),
    "d_neg": ("a", "CASE WHEN d_islong(a) THEN try(-a::BIGINT)::VARCHAR ELSE (-d_num(a))::VARCHAR END"),
    "d_cmp": ("a, b", "CASE WHEN a IS NULL OR b IS NULL THEN NULL WHEN d_isstr(a) AND d_isstr(b) "
                      "THEN CASE WHEN d_str(a) < d_str(b) THEN -1 WHEN d_str(a) > d_str(b) THEN 1 ELSE 0 END "
                      "ELSE sign(d_num(a) - d_num(b)) END"),
    "d_truth": ("v", "CASE WHEN d_isstr(v) THEN lower(d_str(v)) = 'true' ELSE d_num(v) <> 0 END"),
    "d_bool": ("b", "CASE WHEN b THEN '1' WHEN NOT b THEN '0' END"),
}
"""The DuckDB macros compiled expressions call (created once per database)."""

_ARITHMETIC = {"+": "d_add", "-": "d_sub", "*": "d_mul", "/": "d_div", "%": "d_mod", "^": "d_pow"}
_COMPARE = {"<": "< 0", "<=": "<= 0", ">": "> 0", ">=": ">= 0", "==": "= 0", "!=": "<> 0"}
_STRING_FUNCTIONS = {"lower": "lower", "upper": "upper", "trim": "trim", "ltrim": "ltrim", "rtrim": "rtrim"}


def create_macros(database: duckdb.DuckDBPyConnection) -> None:
    """Create :data:`MACROS` in ``database``."""
    for name, (params, body) in MACROS.items():
        database.execute(f"CREATE OR REPLACE MACRO {name}({params}) AS {body}")


def compile_expression(expr: Expr, field: Callable[[str], str], time_millis: str) -> str:
    """DuckDB SQL for ``expr``'s value as JSON text; ``field(name)`` is an input field's JSON text."""
    return _Compiler(field, time_millis).sql(expr)


@dataclass(frozen=True)
class _Compiler:
    """The SQL of one expression's nodes, given its input fields' and row time's SQL."""

    field: Callable[[str], str]
    time_millis: str

    def sql(self, node: Expr) -> str:
        """A node's value as JSON text."""
        if isinstance(node, Literal):
            value = node.value
            return "NULL::VARCHAR" if value is None else quote_string(json.dumps(value) if isinstance(value, str) else
                                                             repr(value))
        if isinstance(node, Field):
            return f"({self.time_millis})::VARCHAR" if node.name == "__time" else self.field(node.name)
        translate = _CALLS.get(node.name)
        if translate is None:
            raise ValueError(f"no SQL for {node.name}")  # parse_expression accepts only the functions in _CALLS
        return translate(self, node.args)

    def string(self, node: Expr) -> str:
        """A node's value as a VARCHAR."""
        return f"d_str({self.sql(node)})"

    def millis(self, node: Expr) -> str:
        """A value read as epoch milliseconds, as a TIMESTAMP (null when out of range)."""
        return f"try(epoch_ms(try_cast(d_num({self.sql(node)}) AS BIGINT)))"

    def truth(self, node: Expr) -> str:
        """A node's value as a condition."""
        return f"d_truth({self.sql(node)})"


_Translation = Callable[[_Compiler, tuple[Expr, ...]], str]
"""The SQL of one function applied to its arguments."""


def _arithmetic(macro: str) -> _Translation:
    """An arithmetic operator: its macro on the two operands."""
    return lambda c, args: f"{macro}({c.sql(args[0])}, {c.sql(args[1])})"


def _comparison(against_zero: str) -> _Translation:
    """A comparison operator: 1 or 0 from ``d_cmp`` of the two operands."""
    return lambda c, args: f"d_bool(d_cmp({c.sql(args[0])}, {c.sql(args[1])}) {against_zero})"


def _logical(operator: str) -> _Translation:
    """``&&`` or ``||``: both operands as conditions."""
    return lambda c, args: f"d_bool({c.truth(args[0])} {operator} {c.truth(args[1])})"


def _string_function(function: str) -> _Translation:
    """A string function of one argument (``lower``, ``trim``, ...)."""
    return lambda c, args: f"d_quote({function}({c.string(args[0])}))"


def _substring(c: _Compiler, args: tuple[Expr, ...]) -> str:
    """``substring(s, start, length)``: null when ``s`` is no longer than ``start``."""
    start, length = (int(a.value) if isinstance(a, Literal) and a.value is not None else 0 for a in args[1:])
    cut = f"substr({c.string(args[0])}, {start + 1}" + (f", {length})" if length >= 0 else ")")
    return f"d_quote(CASE WHEN length({c.string(args[0])}) > {start} THEN {cut} END)"


def _case(c: _Compiler, args: tuple[Expr, ...], subject: Expr | None) -> str:
    """``case_searched`` (no ``subject``) or ``case_simple``: condition/result pairs, then an optional default."""
    whens = [f"WHEN {c.truth(p) if subject is None else f'd_cmp({c.sql(subject)}, {c.sql(p)}) = 0'} "
             f"THEN {c.sql(r)}" for p, r in zip(args[0:-1:2], args[1::2], strict=False)]
    otherwise = f" ELSE {c.sql(args[-1])}" if len(args) % 2 else ""
    return f"CASE {' '.join(whens)}{otherwise} END"


def _regexp_extract(c: _Compiler, args: tuple[Expr, ...]) -> str:
    """``regexp_extract(s, pattern[, group])``: null when ``s`` does not match."""
    group = args[2].value if len(args) == 3 and isinstance(args[2], Literal) else 0
    text, pattern = c.string(args[0]), c.string(args[1])
    return f"d_quote(CASE WHEN regexp_matches({text}, {pattern}) THEN regexp_extract({text}, {pattern}, {group}) END)"


def _abs(c: _Compiler, args: tuple[Expr, ...]) -> str:
    """``abs(x)``: a LONG stays a LONG."""
    value = c.sql(args[0])
    return f"CASE WHEN d_islong({value}) THEN try(abs({value}::BIGINT))::VARCHAR ELSE abs(d_num({value}))::VARCHAR END"


def _cast(c: _Compiler, args: tuple[Expr, ...]) -> str:
    """``cast(x, 'STRING' | 'DOUBLE' | 'LONG')``."""
    target = str(args[1].value if isinstance(args[1], Literal) else "").upper()
    value = c.sql(args[0])
    if target == "STRING":
        return f"d_quote({c.string(args[0])})"
    if target == "DOUBLE":
        return f"d_num({value})::VARCHAR"
    return f"try_cast(trunc(d_num({value})) AS BIGINT)::VARCHAR"


def _timestamp_floor(c: _Compiler, args: tuple[Expr, ...]) -> str:
    """``timestamp_floor(t, period)``: the start of ``t``'s period, in epoch milliseconds."""
    period = args[1].value if isinstance(args[1], Literal) else None
    granularity = Granularity.parse({"type": "period", "period": period})
    return f"try(epoch_ms({bucket_start_sql(granularity, c.millis(args[0]))}))::VARCHAR"


def _timestamp_parse(c: _Compiler, args: tuple[Expr, ...]) -> str:
    """``timestamp_parse(s[, joda_format])``: epoch milliseconds (ISO 8601 without a format)."""
    text = c.string(args[0])
    parsed = (f"try_strptime({text}, {quote_string(joda_to_strptime(str(args[1].value)))})"
              if len(args) == 2 and isinstance(args[1], Literal) else
              f"try_cast({text} AS TIMESTAMPTZ)::TIMESTAMP")
    return f"epoch_ms({parsed})::VARCHAR"


_CALLS: dict[str, _Translation] = {
    **{name: _arithmetic(macro) for name, macro in _ARITHMETIC.items()},
    **{name: _comparison(against_zero) for name, against_zero in _COMPARE.items()},
    "&&": _logical("AND"),
    "||": _logical("OR"),
    "!": lambda c, args: f"d_bool(NOT {c.truth(args[0])})",
    "neg": lambda c, args: f"d_neg({c.sql(args[0])})",
    **{name: _string_function(function) for name, function in _STRING_FUNCTIONS.items()},
    "concat": lambda c, args: f"d_quote({' || '.join(c.string(a) for a in args)})",
    "strlen": lambda c, args: f"length({c.string(args[0])})::VARCHAR",
    "substring": _substring,
    "replace": lambda c, args: f"d_quote(replace({c.string(args[0])}, {c.string(args[1])}, {c.string(args[2])}))",
    "nvl": lambda c, args: f"coalesce({c.sql(args[0])}, {c.sql(args[1])})",
    "isnull": lambda c, args: f"d_bool({c.sql(args[0])} IS NULL)",
    "notnull": lambda c, args: f"d_bool({c.sql(args[0])} IS NOT NULL)",
    "if": lambda c, args: f"CASE WHEN {c.truth(args[0])} THEN {c.sql(args[1])} ELSE {c.sql(args[2])} END",
    "case_searched": lambda c, args: _case(c, args, None),
    "case_simple": lambda c, args: _case(c, args[1:], args[0]),
    "like": lambda c, args: f"d_bool({c.string(args[0])} LIKE {c.string(args[1])})",
    "regexp_extract": _regexp_extract,
    "abs": _abs,
    "cast": _cast,
    "timestamp_floor": _timestamp_floor,
    "timestamp_parse": _timestamp_parse,
    "timestamp_format": lambda c, args: f"d_quote(try(strftime({c.millis(args[0])}, '%Y-%m-%dT%H:%M:%S.%gZ')))",
}
"""Each function's SQL, by name (the functions :func:`specs.expressions.parse_expression` accepts)."""
