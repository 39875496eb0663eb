"""Time pruning: which segments a SQL query's ``__time`` filters prove it need not read.

:func:`time_ranges` parses the SQL Spark will run (sqlglot, Spark's dialect with ``"name"`` an
identifier, as the query session has it). A reference to a table is bounded only by comparisons
(``=  <  <=  >  >=  BETWEEN``) of its own ``__time`` with a constant timestamp (``TIMESTAMP``,
``CAST``/``TRY_CAST`` of an ISO-8601 text Spark reads the same way, ``timestamp_millis(n)``)
ANDed at the top of the WHERE of a SELECT that reads that table alone. Anything else proves
nothing (OR, NOT, other functions of ``__time``, parameters, joins, lateral views, samples,
column aliases, qualified names, a CTE of the same name, a reference count that differs from
Spark's parser's). A table is pruned only if every reference to it is bounded, by their hull.

A segment is read when the min/max ``__time`` its descriptor records (ingestion and compaction
record them) meet the range, and always when it records none: its interval proves nothing, as
rows can lie outside it (a ``queryGranularity`` coarser than the ``segmentGranularity``
truncates them to before its start).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from functools import lru_cache, reduce

import sqlglot
from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.errors import SqlglotError

from segment_store.records import SegmentRecord

__all__ = ["QuerySessionSpark", "TimeRange", "time_ranges"]

_TICK = timedelta(microseconds=1)
"""Spark's timestamp resolution: ``t > x`` is ``t >= x + 1 µs``."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TIMESTAMP_TYPES = frozenset({exp.DataType.Type.TIMESTAMPTZ, exp.DataType.Type.TIMESTAMPLTZ})
"""Spark's ``TIMESTAMP`` and ``TIMESTAMP_LTZ`` (never ``TIMESTAMP_NTZ``, which ignores a zone)."""
_ISO = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})"
                  r"(?:[ T](\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,6}))?(Z|[+-]\d{2}:\d{2})?)?)?")
"""The texts read here, a subset of Spark's: a zone only after seconds, at most 6 fraction digits."""
_TABLE_ARGS = frozenset({"this", "alias"})
"""A table reference with anything more (sample, pivot, lateral, version, ...) proves nothing."""


class QuerySessionSpark(Spark):
    """Spark SQL as the query session reads it: ``"name"`` is an identifier, casts are ANSI (they fail)."""

    class Tokenizer(Spark.Tokenizer):
        """Strings in single quotes only."""

        QUOTES = ["'"]
        IDENTIFIERS = ["`", '"']  # spark.sql.ansi.doubleQuotedIdentifiers

    class Parser(Spark.Parser):  # type: ignore[valid-type,misc]  # sqlglot declares dialect parsers as variables
        """``CAST`` fails on what it cannot convert (``spark.sql.ansi.enabled``), ``TRY_CAST`` gives NULL."""

        STRICT_CAST = True


@dataclass(frozen=True)
class TimeRange:
    """``[start, end)`` of ``__time``, UTC; None is an open side."""

    start: datetime | None = None
    end: datetime | None = None

    @property
    def bounded(self) -> bool:
        return self.start is not None or self.end is not None

    @property
    def empty(self) -> bool:
        return self.start is not None and self.end is not None and self.start >= self.end

    def intersect(self, other: TimeRange) -> TimeRange:
        """Times in both ranges."""
        starts = [t for t in (self.start, other.start) if t is not None]
        ends = [t for t in (self.end, other.end) if t is not None]
        return TimeRange(max(starts, default=None), min(ends, default=None))

    def hull(self, other: TimeRange) -> TimeRange:
        """The smallest range holding both."""
        if self.empty or other.empty:
            return other if self.empty else self
        start = None if self.start is None or other.start is None else min(self.start, other.start)
        end = None if self.end is None or other.end is None else max(self.end, other.end)
        return TimeRange(start, end)

    def reads(self, segment: SegmentRecord) -> bool:
        """Whether a query over this range must read ``segment`` (by its recorded min/max ``__time``)."""
        recorded = _recorded_times(segment)
        if recorded is None:
            return True
        first, last = recorded
        return (self.start is None or last >= self.start) and (self.end is None or first < self.end)


UNBOUNDED = TimeRange()


def time_ranges(sql: str, references: Mapping[str, int]) -> dict[str, TimeRange]:
    """The range each table (lower-case name) of ``sql`` may be read over, for the tables it bounds.

    ``references``: how often Spark's parser saw each single-part table name (lower case); a
    table that sqlglot sees a different number of times is left out.
    """
    hulls = {name: reduce(TimeRange.hull, ranges) for name, ranges in _table_ranges(sql)
             if len(ranges) == references.get(name)}
    return {name: hull for name, hull in hulls.items() if hull.bounded}


@lru_cache(maxsize=1024)
def _table_ranges(sql: str) -> tuple[tuple[str, tuple[TimeRange, ...]], ...]:
    """Each table's name (lower case) and the range of each of its references in ``sql``."""
    try:
        trees = sqlglot.parse(sql, read=QuerySessionSpark)
    except (SqlglotError, IndexError):  # sqlglot's parser raises IndexError on some calls (``map(1, 2, 3)``)
        return ()  # no pruning: every visible file is read
    if len(trees) != 1 or trees[0] is None:
        return ()
    ctes = {cte.alias_or_name.lower() for cte in trees[0].find_all(exp.CTE)}
    found: dict[str, list[TimeRange]] = {}
    for table in trees[0].find_all(exp.Table):
        if isinstance(table.this, exp.Identifier):  # not a table function
            name = table.name.lower()
            plain = name not in ctes and not table.args.get("db") and not table.args.get("catalog")
            found.setdefault(name, []).append(_reference_range(table) if plain else UNBOUNDED)
    return tuple((name, tuple(ranges)) for name, ranges in found.items())


def _reference_range(table: exp.Table) -> TimeRange:
    """The range a WHERE bounds ``table`` to, if the SELECT reads that table and nothing else."""
    select = table.parent.parent if isinstance(table.parent, exp.From) else None
    alias = table.args.get("alias")
    if (not isinstance(select, exp.Select) or select.args.get("joins") or select.args.get("laterals")
            or any(value for key, value in table.args.items() if key not in _TABLE_ARGS)
            or (alias is not None and alias.columns) or select.args.get("where") is None):
        return UNBOUNDED
    qualifiers = {"", table.alias_or_name.lower()}
    ranges = (_condition_range(c, qualifiers) for c in _conjuncts(select.args["where"].this))
    return reduce(TimeRange.intersect, ranges, UNBOUNDED)


def _conjuncts(condition: exp.Expr) -> Iterator[exp.Expr]:
    inner = condition.unnest()
    if isinstance(inner, exp.And):
        yield from _conjuncts(inner.this)
        yield from _conjuncts(inner.expression)
    else:
        yield inner


_MIRRORED: dict[type[exp.Expr], type[exp.Expr]] = {
    exp.EQ: exp.EQ, exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE}


def _condition_range(condition: exp.Expr, qualifiers: set[str]) -> TimeRange:
    """The range one conjunct bounds ``__time`` to (unbounded when it proves nothing)."""
    try:
        if isinstance(condition, exp.Between) and _is_time(condition.this, qualifiers) \
                and not condition.args.get("symmetric"):
            low, high = _timestamp(condition.args["low"]), _timestamp(condition.args["high"])
            return TimeRange(low, None if high is None else high + _TICK)
        kind = type(condition)
        if kind not in _MIRRORED:
            return UNBOUNDED
        column, value = condition.this, condition.expression
        if _is_time(value, qualifiers):
            column, value, kind = value, column, _MIRRORED[kind]
        at = _timestamp(value) if _is_time(column, qualifiers) else None
        if at is None:
            return UNBOUNDED
        bounds: dict[type[exp.Expr], TimeRange] = {
            exp.EQ: TimeRange(at, at + _TICK), exp.GT: TimeRange(at + _TICK, None), exp.GTE: TimeRange(at, None),
            exp.LT: TimeRange(None, at), exp.LTE: TimeRange(None, at + _TICK)}
        return bounds[kind]
    except OverflowError:  # a bound at datetime.max
        return UNBOUNDED


def _is_time(node: exp.Expr, qualifiers: set[str]) -> bool:
    column = node.unnest()
    return (isinstance(column, exp.Column) and column.name.lower() == "__time" and not column.args.get("db")
            and not column.args.get("catalog") and column.table.lower() in qualifiers)


def _timestamp(node: exp.Expr) -> datetime | None:
    """The value of a constant timestamp expression, or None."""
    inner = node.unnest()
    if isinstance(inner, exp.Cast):  # TIMESTAMP '...', CAST('...' AS TIMESTAMP), TRY_CAST (TIME_PARSE)
        text = inner.this
        if (inner.to.this in _TIMESTAMP_TYPES and not inner.to.expressions and not inner.args.get("format")
                and isinstance(text, exp.Literal) and text.is_string):
            return _parse_iso(text.this)
    elif isinstance(inner, exp.Anonymous) and inner.name.lower() == "timestamp_millis" and len(inner.expressions) == 1:
        millis = _integer(inner.expressions[0])
        if millis is not None:
            try:
                return _EPOCH + timedelta(milliseconds=millis)
            except OverflowError:
                return None
    return None


def _integer(node: exp.Expr) -> int | None:
    negative = isinstance(node, exp.Neg)
    literal = node.this if negative else node
    if not (isinstance(literal, exp.Literal) and not literal.is_string and literal.this.isdigit()
            and len(literal.this) <= 19):  # a BIGINT (longer: past Python's int parsing, perhaps)
        return None
    return -int(literal.this) if negative else int(literal.this)


def _parse_iso(text: str) -> datetime | None:
    """``text`` as Spark reads it into a timestamp in a UTC session, or None if not one of :data:`_ISO`."""
    found = _ISO.fullmatch(text)
    if found is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = found.groups()
    zone_info = UTC
    if zone not in (None, "Z"):
        hours, minutes = int(zone[1:3]), int(zone[4:6])
        offset = timedelta(hours=hours, minutes=minutes)
        if minutes >= 60 or offset > timedelta(hours=18):
            return None
        zone_info = timezone(-offset if zone[0] == "-" else offset)
    try:
        local = datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0),
                         int((fraction or "").ljust(6, "0")), tzinfo=zone_info)
        return local.astimezone(UTC)
    except (ValueError, OverflowError):
        return None


def _recorded_times(segment: SegmentRecord) -> tuple[datetime, datetime] | None:
    """The min and max ``__time`` of ``segment``'s rows, as its descriptor records them (UTC-aware)."""
    try:
        first = datetime.fromisoformat(segment.descriptor["min_time"])
        last = datetime.fromisoformat(segment.descriptor["max_time"])
    except (KeyError, TypeError, ValueError):
        return None
    if first.tzinfo is None or last.tzinfo is None:
        return None
    return first, last
