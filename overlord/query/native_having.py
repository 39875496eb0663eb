"""Druid's groupBy ``having`` specs: checked before the query runs, applied to the finished result rows.

Druid applies a having spec to each result row after its post-aggregators are computed, so the
comparisons (``greaterThan``, ``lessThan``, ``equalTo``), ``dimSelector`` and the logic
(``and``/``or``/``not``, ``always``/``never``) are tested on the row here, where post-aggregators are.
A ``filter`` having is any Druid filter over the row's names (dimensions' output names, aggregators,
``__time``); it is SQL: the grouped statement is wrapped in one that adds a boolean column per filter
(:meth:`Having.select`), read by the test. A filter naming a post-aggregator is refused (SQL does not
have it).

Druid's rules, from ``GreaterThanHavingSpec``/``HavingSpecMetricComparator``: a name the row lacks
or a null value matches no comparison (and so ``not`` of one keeps the row); text is read as a
number; a long and a double compare exactly (Python's ``int``/``float`` comparison is exact); NaN is
greater than every number. ``dimSelector`` matches the value's text (``null`` matches null).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from overlord.query.native_checks import bad, field
from specs.filters import filter_columns, filter_condition
from specs.spec_errors import SpecError, join_path

__all__ = ["Having", "parse_having"]

_Test = Callable[[Mapping[str, Any]], bool]
_KEYS = {"greaterThan": {"aggregation", "value"}, "lessThan": {"aggregation", "value"},
         "equalTo": {"aggregation", "value"}, "dimSelector": {"dimension", "value", "extractionFn"},
         "and": {"havingSpecs"}, "or": {"havingSpecs"}, "not": {"havingSpec"}, "filter": {"filter", "finalize"},
         "always": set(), "never": set()}
"""The fields each having type takes (besides ``type``)."""
_COMPARISONS: dict[str, Callable[[int], bool]] = {
    "greaterThan": lambda c: c > 0, "lessThan": lambda c: c < 0, "equalTo": lambda c: c == 0}
_LONG = re.compile(r"[-|+]?\d+")  # Druid's pattern for text read as a long


@dataclass(frozen=True)
class Having:
    """A checked having spec: the boolean SQL columns its filters need, and the test of a finished row."""

    flags: tuple[tuple[str, exp.Expr], ...]
    """(column name, condition over the grouped statement's output names) per ``filter`` having."""
    test: _Test

    def select(self, grouped: exp.Select) -> exp.Select:
        """``grouped``, wrapped to add :attr:`flags` as columns (unchanged when there are none)."""
        if not self.flags:
            return grouped
        columns = [exp.alias_(exp.func("COALESCE", condition, exp.false()), name, quoted=True)
                   for name, condition in self.flags]
        return exp.select(exp.Star(), *columns).from_(grouped.subquery("grouped"))

    def keep(self, row: dict[str, Any]) -> bool:
        """Whether Druid keeps the finished ``row``; the flag columns are removed from it."""
        kept = self.test(row)
        for name, _ in self.flags:
            row.pop(name, None)
        return kept


def parse_having(spec: Any, outputs: set[str], post_aggregators: set[str]) -> Having:
    """``spec`` (at ``$.having``) checked; ``outputs``: the grouped statement's dimension and aggregator names."""
    flags: list[tuple[str, exp.Expr]] = []
    test = _parse(spec, "$.having", outputs, post_aggregators - outputs, flags)
    return Having(tuple(flags), test)


def _parse(spec: Any, path: str, outputs: set[str], post_aggregators: set[str],
           flags: list[tuple[str, exp.Expr]]) -> _Test:
    if not isinstance(spec, Mapping):
        raise bad(path, f"expected a having spec object, got {spec!r}")
    kind = field(spec, "type", path)
    if kind not in _KEYS:
        raise bad(f"{path}.type", f"having type {kind!r} is not supported ({', '.join(_KEYS)} are)")
    unknown = sorted(set(spec) - _KEYS[kind] - {"type"})
    if unknown:
        raise bad(f"{path}.{unknown[0]}", f"a {kind} having does not take {unknown[0]!r}")
    if kind in _COMPARISONS:
        name, value = field(spec, "aggregation", path), field(spec, "value", path, (int, float))
        if isinstance(value, bool):
            raise bad(f"{path}.value", f"expected a number, got {value!r}")
        holds = _COMPARISONS[kind]
        return lambda row: (metric := row.get(name)) is not None and holds(_compare(metric, value, f"{path}"))
    if kind == "dimSelector":
        if spec.get("extractionFn") is not None:
            raise bad(f"{path}.extractionFn", "extraction functions are not supported")
        return _dim_selector(field(spec, "dimension", path), spec.get("value"), f"{path}.value")
    if kind in ("and", "or"):
        specs = field(spec, "havingSpecs", path, list)
        parts = [_parse(s, f"{path}.havingSpecs[{i}]", outputs, post_aggregators, flags) for i, s in enumerate(specs)]
        join = all if kind == "and" else any
        return lambda row: join(part(row) for part in parts)
    if kind == "not":
        inner = _parse(spec.get("havingSpec"), f"{path}.havingSpec", outputs, post_aggregators, flags)
        return lambda row: not inner(row)
    if kind == "filter":
        flag = f"__having{len(flags)}"
        flags.append((flag, _filter(spec.get("filter"), f"{path}.filter", outputs, post_aggregators)))
        return lambda row: row.get(flag) is True
    return lambda _row: kind == "always"


def _compare(metric: Any, value: int | float, path: str) -> int:
    """-1, 0 or 1 as ``metric`` (not null) is below, at or above ``value``, as Druid compares them."""
    if isinstance(metric, str):
        try:
            metric = int(metric) if _LONG.fullmatch(metric) else float(metric)
        except ValueError:
            raise bad(path, f"the value {metric!r} is compared with a number but is not one") from None
    if not isinstance(metric, int | float):
        raise bad(path, f"the value {metric!r} is not a number")
    if isinstance(metric, float) and math.isnan(metric):
        return 1
    return (metric > value) - (metric < value)


def _dim_selector(name: str, value: Any, path: str) -> _Test:
    if value is not None and not isinstance(value, str | int | float):
        raise bad(path, f"expected a string, got {value!r}")
    text = None if value is None else str(value)

    def matches(row: Mapping[str, Any]) -> bool:
        found = row.get(name)
        values = found if isinstance(found, list) else [found]
        return any((None if v is None else _text(v)) == text for v in values)
    return matches


def _text(value: Any) -> str:
    """A value as Java's ``String.valueOf`` writes it (``true``, ``2.0``)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _filter(spec: Any, path: str, outputs: set[str], post_aggregators: set[str]) -> exp.Expr:
    """A Druid filter over the grouped statement's output names (``__time``: the row's time bucket)."""
    try:
        named = [n for n in filter_columns(spec) if n in post_aggregators]
        if named:
            raise SpecError.at("", f"{named[0]!r} is a post-aggregator: a filter having over post-aggregators "
                                   "is not supported (use a greaterThan, lessThan or equalTo having)")
        return filter_condition(spec, lambda name: exp.column("__bucket" if name == "__time" else name, quoted=True)
                                if name in outputs or name == "__time" else exp.Null())  # Druid: a missing column
    except SpecError as exc:
        where, message = exc.errors[0]
        raise bad(join_path(path, where), message) from None
