"""Druid filters as SQL conditions on sqlglot's syntax tree, for native queries and ``transformSpec``.

Supported: ``selector``, ``equals``, ``in``, ``bound`` and ``range`` (lexicographic or numeric),
``like``, ``regex`` (a match anywhere, as Druid's), ``null``, ``interval``, ``search`` (a ``contains``,
``insensitive_contains`` or ``fragment`` query: a ``LIKE`` with the text escaped), ``and``/``or``/``not``
and ``true``/``false``. A condition is NULL where SQL's three-valued logic says so, as in Druid's
default (SQL-compatible) mode: a row is kept where it is true. Values compare as the column holds
them (ingestion reads every field as text; Spark casts a literal to a typed column's type).
``__time`` takes ``interval`` and ``null`` filters only. Names and values from the JSON
are nodes of the tree, quoted by the generator, never pasted into SQL text. Anything else (an
``extractionFn``, another type or ordering, a key a type does not take) is a :class:`SpecError`
naming its path relative to the filter.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import duckdb
from sqlglot import exp

from specs import limits
from specs.durations import parse_utc_interval
from specs.spec_errors import SpecError, join_path, json_type_name

__all__ = ["Column", "check_filter_limits", "check_regex", "filter_columns", "filter_condition", "parse_intervals",
           "time_condition"]

Column = Callable[[str], exp.Expression]
"""Maps a column name of the filter to the SQL expression it reads."""
Extraction = Callable[[object, exp.Expression, bool], exp.Expression]
"""An ``extractionFn`` applied to a column's value (True: the column is ``__time``), as text; SpecError if refused."""

_KEYS: dict[str, frozenset[str]] = {
    "selector": frozenset({"dimension", "value", "extractionFn"}),
    "equals": frozenset({"column", "matchValueType", "matchValue"}),
    "in": frozenset({"dimension", "values", "extractionFn"}),
    "bound": frozenset({"dimension", "lower", "upper", "lowerStrict", "upperStrict", "ordering", "extractionFn"}),
    "range": frozenset({"column", "matchValueType", "lower", "upper", "lowerOpen", "upperOpen"}),
    "like": frozenset({"dimension", "pattern", "escape", "extractionFn"}),
    "regex": frozenset({"dimension", "pattern", "extractionFn"}),
    "null": frozenset({"column"}),
    "interval": frozenset({"dimension", "intervals", "extractionFn"}),
    "search": frozenset({"dimension", "query", "extractionFn"}),
    "and": frozenset({"fields"}), "or": frozenset({"fields"}), "not": frozenset({"field"}),
    "true": frozenset(), "false": frozenset(),
}
"""The keys each filter type takes (besides ``type`` and ``filterTuning``, a performance hint)."""
_NUMERIC_TYPES = ("LONG", "DOUBLE", "FLOAT")


def filter_condition(spec: object, column: Column, extraction: Extraction | None = None) -> exp.Expression:
    """The SQL condition of a Druid filter; :class:`SpecError` (paths relative to it) if unsupported.

    ``extraction`` translates an ``extractionFn`` (native queries'); without it one is refused.
    """
    if not isinstance(spec, Mapping):
        raise SpecError.at("", f"expected a filter object, got {json_type_name(spec)}")
    kind = spec.get("type")
    if kind not in _KEYS:
        raise SpecError.at("type", f"filter type {kind!r} is not supported; supported: {', '.join(_KEYS)}")
    unknown = sorted(set(spec) - _KEYS[kind] - {"type", "filterTuning"})
    if unknown:
        raise SpecError([(key, f"a {kind} filter does not take {key!r} here") for key in unknown])
    extraction_spec = spec.get("extractionFn")
    if extraction_spec is not None and extraction is None:
        raise SpecError.at("extractionFn", "extraction functions are not supported")
    if kind in ("and", "or"):
        fields = _required(spec, "fields", list)
        parts = [_nested(f, f"fields[{i}]", column, extraction) for i, f in enumerate(fields)]
        join = exp.and_ if kind == "and" else exp.or_
        return exp.paren(join(*parts)) if parts else exp.Boolean(this=kind == "and")
    if kind == "not":
        return exp.not_(exp.paren(_nested(spec.get("field"), "field", column, extraction)))
    if kind in ("true", "false"):
        return exp.Boolean(this=kind == "true")
    name = _required(spec, "column" if kind in ("equals", "range", "null") else "dimension", str)
    if name == "__time" and kind not in ("interval", "null") and extraction_spec is None:
        raise SpecError.at("", f"a {kind} filter on __time is not supported: use an interval filter")
    target = column(name)
    if extraction_spec is not None and extraction is not None:
        if kind == "interval":
            raise SpecError.at("extractionFn", "an interval filter with an extraction function is not supported")
        try:
            target = extraction(extraction_spec, target, name == "__time")
        except SpecError as exc:
            raise exc.prefixed("extractionFn") from None
    text = target.copy()
    if kind == "selector":
        value = spec.get("value")
        return exp.Is(this=target, expression=exp.Null()) if value is None else exp.EQ(
            this=text, expression=exp.Literal.string(_text(value)))
    if kind == "equals":
        numeric = _required(spec, "matchValueType", str).upper() in _NUMERIC_TYPES
        value = _required(spec, "matchValue", (str, int, float))
        return exp.EQ(this=_as_double(target) if numeric else text, expression=_literal(value, numeric, "matchValue"))
    if kind == "null":
        return exp.Is(this=target, expression=exp.Null())
    if kind == "in":
        values = _required(spec, "values", list)
        texts = [exp.Literal.string(_text(v)) for v in values if v is not None]
        matches = exp.In(this=text, expressions=texts) if texts else exp.Boolean(this=False)
        if None in values:  # Druid's in matches null for a null value; SQL's IN never does
            return exp.paren(exp.or_(matches, exp.Is(this=target, expression=exp.Null())))
        return matches
    if kind in ("bound", "range"):
        return _bound(spec, target)
    if kind == "like":
        like = exp.Like(this=text, expression=exp.Literal.string(_required(spec, "pattern", str)))
        escape = spec.get("escape")
        if escape is not None and (not isinstance(escape, str) or len(escape) != 1):
            raise SpecError.at("escape", f"expected one character, got {escape!r}")
        return exp.Escape(this=like, expression=exp.Literal.string(escape)) if escape else like
    if kind == "regex":
        return exp.RegexpLike(this=text, expression=exp.Literal.string(check_regex(_required(spec, "pattern", str),
                                                                                   "pattern")))
    if kind == "search":
        return _search(_required(spec, "query", Mapping), text)
    return time_condition(parse_intervals(spec.get("intervals"), "intervals"), target)


_SEARCH_KEYS = {"contains": {"value", "caseSensitive"}, "insensitive_contains": {"value"},
                "fragment": {"values", "caseSensitive"}}
"""The search query specs a ``search`` filter takes, and their keys (besides ``type``)."""


def _search(spec: Mapping[str, Any], text: exp.Expression) -> exp.Expression:
    """A value containing the spec's text (each of ``fragment``'s), ignoring case unless ``caseSensitive``."""
    kind = spec.get("type")
    if kind not in _SEARCH_KEYS:
        raise SpecError.at("query.type", f"search query type {kind!r} is not supported; supported: "
                                         f"{', '.join(_SEARCH_KEYS)}")
    unknown = sorted(set(spec) - _SEARCH_KEYS[kind] - {"type"})
    if unknown:
        raise SpecError.at(f"query.{unknown[0]}", f"a {kind} search query does not take {unknown[0]!r}")
    sensitive = spec.get("caseSensitive", False)
    if not isinstance(sensitive, bool):
        raise SpecError.at("query.caseSensitive", f"expected true or false, got {json_type_name(sensitive)}")
    values = spec.get("values") if kind == "fragment" else [spec.get("value")]
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise SpecError.at("query.values" if kind == "fragment" else "query.value", "expected text")
    parts: list[exp.Expression] = []
    for value in values:
        pattern: exp.Expression = exp.Literal.string("%" + re.sub(r"([\\%_])", r"\\\1", value) + "%")
        target = text.copy()
        if not sensitive:
            target, pattern = exp.Lower(this=target), exp.Lower(this=pattern)
        parts.append(exp.Escape(this=exp.Like(this=target, expression=pattern), expression=exp.Literal.string("\\")))
    return exp.paren(exp.and_(*parts)) if parts else exp.Not(this=exp.Is(this=text, expression=exp.Null()))


def check_filter_limits(spec: object) -> None:
    """Refuse a filter past the limits of :mod:`specs.limits` (:class:`SpecError`, paths relative to it).

    Nesting (and/or/not), the number of filter objects, of values and intervals, and the lengths of
    names and patterns; checked without recursion, before the filter is translated (recursively).
    """
    clauses = 0
    todo: list[tuple[object, str, int]] = [(spec, "", 1)]
    while todo:
        node, path, depth = todo.pop()
        if not isinstance(node, Mapping):
            continue  # not a filter: filter_condition says so
        clauses += 1
        if depth > limits.MAX_FILTER_DEPTH:
            raise SpecError.at(path, f"filters may nest at most {limits.MAX_FILTER_DEPTH} levels deep (a limit of "
                                     "this service)")
        limits.check_at_most(clauses + len(todo), limits.MAX_FILTER_CLAUSES, "filter objects in a filter")
        for key, limit, what in (("dimension", limits.MAX_NAME_LENGTH, "characters"),
                                 ("column", limits.MAX_NAME_LENGTH, "characters"),
                                 ("pattern", limits.MAX_PATTERN_LENGTH, "characters"),
                                 ("values", limits.MAX_FILTER_VALUES, "values"),
                                 ("intervals", limits.MAX_FILTER_VALUES, "intervals"),
                                 ("fields", limits.MAX_FILTER_CLAUSES, "filter objects in a filter")):
            value = node.get(key)
            if isinstance(value, str | list):
                limits.check_at_most(len(value), limit, what, join_path(path, key))
        query = node.get("query")  # a search filter's fragments
        if isinstance(query, Mapping) and isinstance(query.get("values"), list):
            limits.check_at_most(len(query["values"]), limits.MAX_FILTER_VALUES, "values",
                                 join_path(path, "query.values"))
        fields = node.get("fields")
        if isinstance(fields, list):
            todo.extend((item, join_path(path, f"fields[{index}]"), depth + 1) for index, item in enumerate(fields))
        if "field" in node:
            todo.append((node["field"], join_path(path, "field"), depth + 1))


def filter_columns(spec: object) -> list[str]:
    """The column names a (valid) filter reads, in order of first use."""
    names: dict[str, None] = {}
    if isinstance(spec, Mapping):
        for key in ("dimension", "column"):
            if isinstance(spec.get(key), str):
                names[spec[key]] = None
        for inner in [*(spec.get("fields") or []), spec.get("field")]:
            names.update(dict.fromkeys(filter_columns(inner)))
    return list(names)


def time_condition(intervals: list[tuple[datetime, datetime]], column: exp.Expression) -> exp.Expression:
    """``column`` within any of ``intervals`` (each ``[start, end)``)."""
    def within(start: datetime, end: datetime) -> exp.Expression:
        return exp.paren(exp.and_(exp.GTE(this=column.copy(), expression=_timestamp(start)),
                                  exp.LT(this=column.copy(), expression=_timestamp(end))))
    return exp.paren(exp.or_(*(within(start, end) for start, end in intervals)))


def parse_intervals(texts: object, path: str) -> list[tuple[datetime, datetime]]:
    """ISO-8601 intervals (a list of them, or one); :class:`SpecError` at ``path`` if invalid."""
    texts = [texts] if isinstance(texts, str) else texts
    if not isinstance(texts, list) or not texts:
        raise SpecError.at(path, 'expected ISO-8601 intervals, e.g. ["2026-11-01/2026-11-02"]')
    try:
        return [parse_utc_interval(str(text)) for text in texts]
    except ValueError as exc:
        raise SpecError.at(path, str(exc)) from None


def check_regex(pattern: str, path: str) -> str:
    """``pattern`` if RE2 (what DuckDB and Spark's ``rlike`` share, mostly) compiles it; else :class:`SpecError`."""
    problem = _regex_problem(pattern)
    if problem is not None:
        raise SpecError.at(path, f"not a supported regular expression ({problem})")
    return pattern


@functools.lru_cache(maxsize=256)
def _regex_problem(pattern: str) -> str | None:
    with duckdb.connect() as con:  # its own connection: specs are validated on many threads
        try:
            con.execute("SELECT regexp_matches('', ?)", [pattern])
        except duckdb.Error as exc:
            return str(exc).splitlines()[0]
    return None


def _nested(spec: object, path: str, column: Column, extraction: Extraction | None) -> exp.Expression:
    try:
        return filter_condition(spec, column, extraction)
    except SpecError as exc:
        raise exc.prefixed(path) from None


def _required(spec: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = spec.get(key)
    if value is None:
        raise SpecError.at(key, "is required")
    if not isinstance(value, kind) or isinstance(value, bool):
        raise SpecError.at(key, f"expected {getattr(kind, '__name__', 'a string or number')}, got "
                                f"{json_type_name(value)}")
    return value


def _text(value: object) -> str:
    """A value as Druid's string comparisons see it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _as_double(target: exp.Expression) -> exp.Expression:
    return exp.TryCast(this=target, to=exp.DataType.build("DOUBLE"))


def _literal(value: object, numeric: bool, path: str) -> exp.Expression:
    if not numeric:
        return exp.Literal.string(_text(value))
    try:
        return exp.Literal.number(float(str(value)))
    except ValueError:
        raise SpecError.at(path, f"expected a number, got {value!r}") from None


def _bound(spec: Mapping[str, Any], target: exp.Expression) -> exp.Expression:
    if spec["type"] == "bound":
        ordering = str(spec.get("ordering") or "lexicographic").lower()
        if ordering not in ("lexicographic", "numeric"):
            raise SpecError.at("ordering", f"ordering {spec.get('ordering')!r} is not supported (lexicographic "
                                           "and numeric are)")
        numeric, strict = ordering == "numeric", ("lowerStrict", "upperStrict")
    else:
        numeric, strict = _required(spec, "matchValueType", str).upper() in _NUMERIC_TYPES, ("lowerOpen", "upperOpen")
    value = _as_double(target) if numeric else target
    parts: list[exp.Expression] = []
    for key, strict_key, strict_op, loose_op in (("lower", strict[0], exp.GT, exp.GTE),
                                                 ("upper", strict[1], exp.LT, exp.LTE)):
        if spec.get(key) is not None:
            parts.append((strict_op if spec.get(strict_key) else loose_op)(
                this=value.copy(), expression=_literal(spec[key], numeric, key)))
    if not parts:
        raise SpecError.at("", f"a {spec['type']} filter needs a lower or an upper bound")
    return exp.paren(exp.and_(*parts))


def _timestamp(ts: datetime) -> exp.Expression:
    return exp.cast(exp.Literal.string(ts.strftime("%Y-%m-%d %H:%M:%S.%f")), "TIMESTAMP")
