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

import duckdb

from indexing_task.buckets import bucket_start_sql
from indexing_task.sql_text import quote_string
from specs.expressions import Call, Expr, Field, Literal, joda_to_strptime
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
    def sql(node: Expr) -> str:
        if isinstance(node, Literal):
            value = node.value
            return "NULL::VARCHAR" if value is None else quote_string(json.dumps(value) if isinstance(value, str) else
                                                             repr(value))
        if isinstance(node, Field):
            return f"({time_millis})::VARCHAR" if node.name == "__time" else field(node.name)
        return call(node)

    def string(node: Expr) -> str:
        return f"d_str({sql(node)})"

    def millis(node: Expr) -> str:
        """A value read as epoch milliseconds, as a TIMESTAMP (null when out of range)."""
        return f"try(epoch_ms(try_cast(d_num({sql(node)}) AS BIGINT)))"

    def truth(node: Expr) -> str:
        return f"d_truth({sql(node)})"

    def call(node: Call) -> str:
        name, args = node.name, node.args
        if name in _ARITHMETIC:
            return f"{_ARITHMETIC[name]}({sql(args[0])}, {sql(args[1])})"
        if name in _COMPARE:
            return f"d_bool(d_cmp({sql(args[0])}, {sql(args[1])}) {_COMPARE[name]})"
        if name in ("&&", "||"):
            return f"d_bool({truth(args[0])} {'AND' if name == '&&' else 'OR'} {truth(args[1])})"
        if name == "!":
            return f"d_bool(NOT {truth(args[0])})"
        if name == "neg":
            return f"d_neg({sql(args[0])})"
        if name in _STRING_FUNCTIONS:
            return f"d_quote({_STRING_FUNCTIONS[name]}({string(args[0])}))"
        if name == "concat":
            return f"d_quote({' || '.join(string(a) for a in args)})"
        if name == "strlen":
            return f"length({string(args[0])})::VARCHAR"
        if name == "substring":
            start, length = (int(a.value) if isinstance(a, Literal) and a.value is not None else 0 for a in args[1:])
            cut = f"substr({string(args[0])}, {start + 1}" + (f", {length})" if length >= 0 else ")")
            return f"d_quote(CASE WHEN length({string(args[0])}) > {start} THEN {cut} END)"
        if name == "replace":
            return f"d_quote(replace({string(args[0])}, {string(args[1])}, {string(args[2])}))"
        if name == "nvl":
            return f"coalesce({sql(args[0])}, {sql(args[1])})"
        if name == "isnull":
            return f"d_bool({sql(args[0])} IS NULL)"
        if name == "notnull":
            return f"d_bool({sql(args[0])} IS NOT NULL)"
        if name == "if":
            return f"CASE WHEN {truth(args[0])} THEN {sql(args[1])} ELSE {sql(args[2])} END"
        if name in ("case_searched", "case_simple"):
            subject, rest = (args[0], args[1:]) if name == "case_simple" else (None, args)
            whens = [f"WHEN {truth(p) if subject is None else f'd_cmp({sql(subject)}, {sql(p)}) = 0'} "
                     f"THEN {sql(r)}" for p, r in zip(rest[0:-1:2], rest[1::2], strict=False)]
            otherwise = f" ELSE {sql(rest[-1])}" if len(rest) % 2 else ""
            return f"CASE {' '.join(whens)}{otherwise} END"
        if name == "like":
            return f"d_bool({string(args[0])} LIKE {string(args[1])})"
        if name == "regexp_extract":
            group = args[2].value if len(args) == 3 and isinstance(args[2], Literal) else 0
            text, pattern = string(args[0]), string(args[1])
            return (f"d_quote(CASE WHEN regexp_matches({text}, {pattern}) "
                    f"THEN regexp_extract({text}, {pattern}, {group}) END)")
        if name == "abs":
            value = sql(args[0])
            return (f"CASE WHEN d_islong({value}) THEN try(abs({value}::BIGINT))::VARCHAR "
                    f"ELSE abs(d_num({value}))::VARCHAR END")
        if name == "cast":
            target = str(args[1].value if isinstance(args[1], Literal) else "").upper()
            value = sql(args[0])
            if target == "STRING":
                return f"d_quote({string(args[0])})"
            if target == "DOUBLE":
                return f"d_num({value})::VARCHAR"
            return f"try_cast(trunc(d_num({value})) AS BIGINT)::VARCHAR"
        if name == "timestamp_floor":
            period = args[1].value if isinstance(args[1], Literal) else None
            granularity = Granularity.parse({"type": "period", "period": period})
            return f"try(epoch_ms({bucket_start_sql(granularity, millis(args[0]))}))::VARCHAR"
        if name == "timestamp_parse":
            text = string(args[0])
            parsed = (f"try_strptime({text}, {quote_string(joda_to_strptime(str(args[1].value)))})"
                      if len(args) == 2 and isinstance(args[1], Literal) else
                      f"try_cast({text} AS TIMESTAMPTZ)::TIMESTAMP")
            return f"epoch_ms({parsed})::VARCHAR"
        if name == "timestamp_format":
            return f"d_quote(try(strftime({millis(args[0])}, '%Y-%m-%dT%H:%M:%S.%gZ')))"
        raise ValueError(f"no SQL for {name}")  # parse_expression accepts only the functions above

    return sql(expr)
