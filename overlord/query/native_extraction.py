"""Druid's extraction functions (``extractionFn``) as Druid SQL expressions, for native queries.

Supported, with Druid's SQL-compatible null handling: ``substring``, ``strlen``, ``upper``,
``lower`` (no locale or an English one), ``regex`` (the first match anywhere; an unmatched value as
is, or ``replaceMissingValueWith``), ``partial``, ``searchQuery``, ``timeFormat`` (UTC, an English
locale, an optional granularity, ``asMillis``), ``bucket``, ``stringFormat`` (``%s`` formats),
``identity`` and ``cascade`` of these. ``__time`` is read as a timestamp by ``timeFormat`` and
``bucket`` (its milliseconds) and as ISO-8601 text by the others, as Druid passes it. Anything
else (``javascript``: user code is never run; ``lookup``, ``registeredLookup``: no lookups here)
is a :class:`SpecError` naming its path relative to the function.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, cast

from sqlglot import exp

from overlord.query.native_checks import GRANULARITIES
from specs.filters import check_regex, filter_condition
from specs.spec_errors import SpecError, json_type_name

__all__ = ["extract"]

_KEYS: dict[str, frozenset[str]] = {
    "substring": frozenset({"index", "length"}), "strlen": frozenset(), "upper": frozenset({"locale"}),
    "lower": frozenset({"locale"}), "regex": frozenset({"expr", "index", "replaceMissingValue",
                                                       "replaceMissingValueWith"}),
    "partial": frozenset({"expr"}), "searchQuery": frozenset({"query"}),
    "timeFormat": frozenset({"format", "timeZone", "locale", "granularity", "asMillis"}),
    "bucket": frozenset({"size", "offset"}), "stringFormat": frozenset({"format", "nullHandling"}),
    "identity": frozenset(), "cascade": frozenset({"extractionFns"}),
}
"""The extraction functions supported and the keys each takes (besides ``type``)."""
_REFUSED = {"javascript": "user code is never run here", "lookup": "there are no lookups here",
            "registeredLookup": "there are no lookups here"}
_TIME = "__time"
_SAME_LETTERS = "yMdDEaHhKkmsS"
"""Time format letters Joda (Druid's) and Spark read alike; others (``Y``, ``x``, ``w``, zones) are refused."""
_TEXT = exp.DataType.build("VARCHAR")


def extract(spec: object, value: exp.Expr, is_time: bool = False) -> exp.Expr:
    """``value`` (a timestamp if ``is_time``) through the extraction function ``spec``: text, or NULL."""
    result, result_is_time = _apply(spec, value, is_time)
    return _text(result, result_is_time)


def _apply(spec: object, value: exp.Expr, is_time: bool) -> tuple[exp.Expr, bool]:
    if not isinstance(spec, Mapping):
        raise SpecError.at("", f"expected an extraction function object, got {json_type_name(spec)}")
    kind = spec.get("type")
    if kind in _REFUSED:
        raise SpecError.at("type", f"extraction function type {kind!r} is not supported: {_REFUSED[kind]}")
    if kind not in _KEYS:
        raise SpecError.at("type", f"extraction function type {kind!r} is not supported; supported: "
                                   f"{', '.join(_KEYS)}")
    unknown = sorted(set(spec) - _KEYS[kind] - {"type"})
    if unknown:
        raise SpecError.at(unknown[0], f"a {kind} extraction function does not take {unknown[0]!r}")
    if kind == "cascade":
        functions = spec.get("extractionFns")
        if not isinstance(functions, list) or not functions:
            raise SpecError.at("extractionFns", "expected a list of extraction functions")
        for i, inner in enumerate(functions):
            try:
                value, is_time = _apply(inner, value, is_time)
            except SpecError as exc:
                raise exc.prefixed(f"extractionFns[{i}]") from None
        return value, is_time
    if kind == "identity":
        return value, is_time
    if kind == "timeFormat":
        return _time_format(spec, value, is_time), False
    if kind == "bucket":
        return _bucket(spec, value, is_time), False
    return _string_function(kind, spec, _text(value, is_time)), False


def _string_function(kind: str, spec: Mapping[str, Any], text: exp.Expr) -> exp.Expr:
    """One of the functions of a value's text."""
    if kind == "substring":
        index = _integer(spec, "index", 0, required=True)
        length = spec.get("length")
        if length is not None and (not isinstance(length, int) or isinstance(length, bool) or length < 0):
            raise SpecError.at("length", f"expected a whole number >= 0, got {length!r}")
        return exp.Substring(this=text, start=exp.Literal.number(index + 1),
                             length=None if length is None else exp.Literal.number(length))
    if kind == "strlen":
        return exp.cast(exp.Length(this=text), _TEXT)
    if kind in ("upper", "lower"):
        locale = spec.get("locale")
        if locale is not None and not (isinstance(locale, str) and re.fullmatch(r"(en|root)?([-_].*)?", locale)):
            raise SpecError.at("locale", f"{locale!r} is not supported (no locale or an English one is)")
        return exp.Upper(this=text) if kind == "upper" else exp.Lower(this=text)
    if kind in ("partial", "searchQuery"):
        match = ({"type": "regex", "dimension": "v", "pattern": _string(spec, "expr")} if kind == "partial"
                 else {"type": "search", "dimension": "v", "query": spec.get("query")})
        condition = filter_condition(match, lambda _name: cast(exp.Expression, text.copy()))
        return exp.If(this=condition, true=text.copy(), false=exp.Null())
    if kind == "regex":
        return _regex(spec, text)
    return _string_format(spec, text)


def _regex(spec: Mapping[str, Any], text: exp.Expr) -> exp.Expr:
    """The group ``index`` (default 1) of the first match; an unmatched (or null) value as is or replaced."""
    pattern = exp.Literal.string(check_regex(_string(spec, "expr"), "expr"))
    index = _integer(spec, "index", 1)
    replace = spec.get("replaceMissingValue", False)
    if not isinstance(replace, bool):
        raise SpecError.at("replaceMissingValue", f"expected true or false, got {json_type_name(replace)}")
    replacement = spec.get("replaceMissingValueWith")
    if replacement is not None and not isinstance(replacement, str):
        raise SpecError.at("replaceMissingValueWith", f"expected text, got {json_type_name(replacement)}")
    missing = (exp.Null() if replacement is None else exp.Literal.string(replacement)) if replace else text.copy()
    found = exp.RegexpExtract(this=text.copy(), expression=pattern.copy(), group=exp.Literal.number(index))
    return exp.If(this=exp.RegexpLike(this=text.copy(), expression=pattern), true=found, false=missing)


def _string_format(spec: Mapping[str, Any], text: exp.Expr) -> exp.Expr:
    """Java's ``String.format(format, value)`` for formats whose only conversions are ``%s`` and ``%%``."""
    form = _string(spec, "format")
    handling = spec.get("nullHandling") or "nullString"
    nulls = {"nullString": exp.Literal.string("null"), "emptyString": exp.Literal.string(""), "returnNull": None}
    if handling not in nulls:
        raise SpecError.at("nullHandling", f"{handling!r} is not one of nullString, emptyString, returnNull")
    substitute = nulls[handling]
    value = text if substitute is None else exp.Coalesce(this=text, expressions=[substitute])
    parts: list[exp.Expr] = []
    for piece in re.split(r"(%.)", form):
        if piece == "%s":
            parts.append(value.copy())
        elif piece == "%%":
            parts.append(exp.Literal.string("%"))
        elif piece.startswith("%"):
            raise SpecError.at("format", f"only %s and %% conversions are supported, found {piece!r}")
        elif piece:
            parts.append(exp.Literal.string(piece))
    if len(parts) == 1:
        return parts[0]
    return exp.Concat(expressions=parts)


def _time_format(spec: Mapping[str, Any], value: exp.Expr, is_time: bool) -> exp.Expr:
    """A time (``__time``, or ISO-8601 text, or milliseconds with ``asMillis``) floored and formatted, in UTC."""
    as_millis = spec.get("asMillis", False)
    if not isinstance(as_millis, bool):
        raise SpecError.at("asMillis", f"expected true or false, got {json_type_name(as_millis)}")
    zone = spec.get("timeZone")
    if zone is not None and str(zone).upper() not in ("UTC", "ETC/UTC", "Z", "GMT"):
        raise SpecError.at("timeZone", f"{zone!r} is not supported; times are UTC")
    locale = spec.get("locale")
    if locale is not None and not (isinstance(locale, str) and re.fullmatch(r"en([-_].*)?", locale)):
        raise SpecError.at("locale", f"{locale!r} is not supported (no locale or an English one is)")
    form = spec.get("format")
    if form is not None and not isinstance(form, str):
        raise SpecError.at("format", f"expected a Joda time format, got {json_type_name(form)}")
    letters = set(re.sub(r"'[^']*'", "", form or "")) - set(_SAME_LETTERS)
    if any(letter.isalpha() for letter in letters):
        raise SpecError.at("format", f"pattern letters {''.join(sorted(c for c in letters if c.isalpha()))!r} are "
                                     f"not supported (the letters Joda and Spark read alike are: {_SAME_LETTERS})")
    time = value
    if not is_time:
        time = (exp.Anonymous(this="MILLIS_TO_TIMESTAMP", expressions=[exp.cast(value, "BIGINT")]) if as_millis
                else exp.Anonymous(this="TIME_PARSE", expressions=[exp.cast(value, _TEXT)]))
    granularity = spec.get("granularity")
    if granularity is not None:
        time = exp.Anonymous(this="TIME_FLOOR", expressions=[time, exp.Literal.string(_period(granularity))])
    if form is None and as_millis:
        return exp.cast(exp.Anonymous(this="TIMESTAMP_TO_MILLIS", expressions=[time]), _TEXT)
    return exp.Anonymous(this="TIME_FORMAT", expressions=[time] + ([exp.Literal.string(form)] if form else []))


def _period(granularity: object) -> str:
    """The ISO period of a named or ``period`` granularity (UTC, no origin)."""
    if isinstance(granularity, Mapping):
        if granularity.get("type") != "period" or granularity.get("origin") is not None:
            raise SpecError.at("granularity", "only period granularities (no origin) and the named ones are "
                                              "supported")
        zone = granularity.get("timeZone")
        if zone is not None and str(zone).upper() not in ("UTC", "ETC/UTC"):
            raise SpecError.at("granularity.timeZone", f"{zone!r} is not supported; times are UTC")
        return _string(granularity, "period", "granularity.period")
    name = str(granularity).lower()
    if name not in GRANULARITIES:
        raise SpecError.at("granularity", f"{granularity!r} is not a granularity here ({', '.join(GRANULARITIES)})")
    return GRANULARITIES[name]


def _bucket(spec: Mapping[str, Any], value: exp.Expr, is_time: bool) -> exp.Expr:
    """``floor((x - offset) / size) * size + offset`` as text, whole numbers without a point; NULL if not a number."""
    size, offset = (_number(spec, key, default) for key, default in (("size", 1), ("offset", 0)))
    if size <= 0:
        raise SpecError.at("size", f"expected a number > 0, got {size!r}")
    number = (exp.Anonymous(this="TIMESTAMP_TO_MILLIS", expressions=[value]) if is_time
              else exp.cast(value, "DOUBLE"))
    floored = exp.Add(this=exp.Mul(this=exp.Floor(this=exp.Div(
        this=exp.paren(exp.Sub(this=number, expression=exp.Literal.number(offset))),
        expression=exp.Literal.number(size))), expression=exp.Literal.number(size)),
        expression=exp.Literal.number(offset))
    whole = exp.EQ(this=floored.copy(), expression=exp.Floor(this=floored.copy()))
    return exp.If(this=whole, true=exp.cast(exp.cast(floored.copy(), "BIGINT"), _TEXT),
                  false=exp.cast(floored, _TEXT))


def _text(value: exp.Expr, is_time: bool) -> exp.Expr:
    """A value as the string functions see it: ``__time`` as ISO-8601 text, a number as its text."""
    if is_time:
        return exp.Anonymous(this="TIME_FORMAT", expressions=[value])
    if isinstance(value, exp.Column):  # as it is: a multi-value column's functions apply to each value
        return value
    return exp.cast(value, _TEXT)


def _string(spec: Mapping[str, Any], key: str, path: str | None = None) -> str:
    value = spec.get(key)
    if not isinstance(value, str) or not value:
        raise SpecError.at(path or key, f"expected text, got {json_type_name(value)}")
    return value


def _integer(spec: Mapping[str, Any], key: str, default: int, required: bool = False) -> int:
    value = spec.get(key, None if required else default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise SpecError.at(key, f"expected a whole number >= 0, got {value!r}")
    return value


def _number(spec: Mapping[str, Any], key: str, default: float) -> float:
    value = spec.get(key, default)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise SpecError.at(key, f"expected a number, got {json_type_name(value)}")
    return value
