"""Druid's own SQL functions as Spark expressions, each with Druid's semantics.

``TIME_FLOOR`` and the other time functions, ``LATEST``/``EARLIEST``, the sketch aggregates,
``BITWISE_*`` and the renamed ones (``STRLEN``, ...). Each takes the call's arguments (sqlglot
expressions) and gives the Spark expression, or raises a :class:`QueryError` naming what is not
supported. The rewrite rules (:mod:`overlord.query.druid_rewrite_rules`) call them, and share the
helpers here that build Spark SQL.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime

import sqlglot
from sqlglot import exp

from overlord.query.query_errors import QueryError
from overlord.query.sketch_sql import sketch_argument
from specs.sketch_aggregators import Sketch

__all__ = ["DRUID_FUNCTIONS", "FLOOR_UNITS", "MILLIS", "UTC_NAMES", "any_value", "ceil_time", "check_arity",
           "complex_argument", "integer_argument", "over_complex", "parse_period", "quantile_probability", "spark_sql",
           "truncate_time"]


_PERIOD = re.compile(r"P(?:(\d+)([YMWD])|T(\d+)([HMS]))", re.IGNORECASE)
_DATE_UNITS = {"Y": "YEAR", "M": "MONTH", "W": "WEEK", "D": "DAY"}
_TIME_UNITS = {"H": "HOUR", "M": "MINUTE", "S": "SECOND"}
MILLIS = {"WEEK": 604_800_000, "DAY": 86_400_000, "HOUR": 3_600_000, "MINUTE": 60_000, "SECOND": 1_000}
FLOOR_UNITS = frozenset({"SECOND", "MINUTE", "HOUR", "DAY", "WEEK", "MONTH", "QUARTER", "YEAR"})
_EXTRACT = {"EPOCH": "unix_seconds(_t)", "SECOND": "second(_t)", "MINUTE": "minute(_t)", "HOUR": "hour(_t)",
            "DAY": "dayofmonth(_t)", "DOW": "extract(DAYOFWEEK_ISO FROM _t)",
            "ISODOW": "extract(DAYOFWEEK_ISO FROM _t)",
            "DOY": "dayofyear(_t)", "WEEK": "weekofyear(_t)", "MONTH": "month(_t)", "QUARTER": "quarter(_t)",
            "YEAR": "year(_t)"}
_ISO_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"
UTC_NAMES = frozenset({"UTC", "ETC/UTC", "Z", "GMT", "+00:00"})
"""Time zone names (upper case) accepted: every timestamp here is UTC."""


def spark_sql(template: str, **args: exp.Expr) -> exp.Expr:
    """Spark SQL ``template`` with the columns named like ``args`` replaced by those expressions."""
    tree = sqlglot.parse_one(template, read="spark")
    return tree.transform(lambda n: args[n.name].copy() if isinstance(n, exp.Column) and n.name in args else n)


def _literal(args: list[exp.Expr], index: int, function: str, what: str) -> str | None:
    """A string literal argument (None when absent or NULL); anything else is refused."""
    if index >= len(args) or isinstance(args[index], exp.Null):
        return None
    if not (isinstance(args[index], exp.Literal) and args[index].is_string):
        raise QueryError(f"{function}: the {what} must be a string literal", "UNSUPPORTED_DRUID_SQL")
    return str(args[index].this)


def check_arity(function: str, args: list[exp.Expr], low: int, high: int) -> None:
    """Refuse a call of ``function`` with fewer than ``low`` or more than ``high`` arguments."""
    if not low <= len(args) <= high:
        expected = f"{low} argument" + ("" if low == 1 else "s") if low == high else f"{low} to {high} arguments"
        raise QueryError(f"{function} takes {expected}, got {len(args)}", "UNSUPPORTED_DRUID_SQL")


def _utc_only(function: str, args: list[exp.Expr], index: int) -> None:
    zone = _literal(args, index, function, "time zone")
    if zone is not None and zone.upper() not in UTC_NAMES:
        raise QueryError(f"{function}: time zone {zone!r} is not supported; timestamps are UTC",
                         "UNSUPPORTED_DRUID_SQL")


def parse_period(text: str) -> tuple[int, str] | None:
    """(count, unit) of a one-unit ISO-8601 period such as ``PT15M`` (unit ``MINUTE``); None if not one."""
    found = _PERIOD.fullmatch(text)
    if found is None:
        return None
    if found.group(1):
        return int(found.group(1)), _DATE_UNITS[found.group(2).upper()]
    return int(found.group(3)), _TIME_UNITS[found.group(4).upper()]


def _period(function: str, args: list[exp.Expr], index: int = 1) -> tuple[int, str]:
    text = _literal(args, index, function, "period")
    period = parse_period(text or "")
    if period is None:
        raise QueryError(f"{function}: period {text!r} is not supported; use one ISO-8601 unit such as PT1H, "
                         "PT15M, P1D, P1W, P1M, P3M or P1Y", "UNSUPPORTED_DRUID_SQL")
    return period


def truncate_time(ts: exp.Expr, unit: str) -> exp.Expr:
    """``ts`` truncated to a calendar ``unit`` (``HOUR``, ``MONTH``, ...)."""
    return exp.Anonymous(this="date_trunc", expressions=[exp.Literal.string(unit), ts.copy()])


def _floor(ts: exp.Expr, count: int, unit: str) -> exp.Expr:
    """Druid's period floor: one unit truncates; a multiple counts whole periods from the epoch."""
    if count == 1 or (unit == "MONTH" and count == 3):
        return truncate_time(ts, unit if count == 1 else "QUARTER")
    n = exp.Literal.number(count)
    if unit in MILLIS:
        return spark_sql("timestamp_millis(floor(unix_millis(_t) / _n) * _n)", _t=ts,
                         _n=exp.Literal.number(count * MILLIS[unit]))
    if unit == "MONTH":
        return spark_sql("CAST(add_months(DATE'1970-01-01', CAST(floor(((year(_t) - 1970) * 12 + month(_t) - 1) "
                         "/ _n) * _n AS INT)) AS TIMESTAMP)", _t=ts, _n=n)
    return spark_sql("make_timestamp(CAST(1970 + floor((year(_t) - 1970) / _n) * _n AS INT), 1, 1, 0, 0, 0)", _t=ts,
                     _n=n)


def _shift(ts: exp.Expr, count: int, unit: str, step: exp.Expr) -> exp.Expr:
    amount = spark_sql("_n * _s", _n=exp.Literal.number(count), _s=step)
    return exp.Anonymous(this="timestampadd", expressions=[exp.Var(this=unit), amount, ts.copy()])


def ceil_time(ts: exp.Expr, floor: exp.Expr, unit: str, count: int) -> exp.Expr:
    """``ts`` rounded up to a period of ``count`` ``unit``: itself if on its ``floor``, else the next period's start."""
    return spark_sql("CASE WHEN _f = _t THEN _t ELSE _g END", _f=floor, _t=ts,
                     _g=_shift(floor, count, unit, exp.Literal.number(1)))


def _time_floor(args: list[exp.Expr]) -> exp.Expr:
    check_arity("TIME_FLOOR", args, 2, 4)
    if _literal(args, 2, "TIME_FLOOR", "origin") is not None:
        raise QueryError("TIME_FLOOR: an origin is not supported", "UNSUPPORTED_DRUID_SQL")
    _utc_only("TIME_FLOOR", args, 3)
    return _floor(args[0], *_period("TIME_FLOOR", args))


def _time_ceil(args: list[exp.Expr]) -> exp.Expr:
    check_arity("TIME_CEIL", args, 2, 4)
    if _literal(args, 2, "TIME_CEIL", "origin") is not None:
        raise QueryError("TIME_CEIL: an origin is not supported", "UNSUPPORTED_DRUID_SQL")
    _utc_only("TIME_CEIL", args, 3)
    count, unit = _period("TIME_CEIL", args)
    return ceil_time(args[0], _floor(args[0], count, unit), unit, count)


def _time_shift(args: list[exp.Expr]) -> exp.Expr:
    check_arity("TIME_SHIFT", args, 3, 4)
    _utc_only("TIME_SHIFT", args, 3)
    return _shift(args[0], *_period("TIME_SHIFT", args), args[2])


def _time_extract(args: list[exp.Expr]) -> exp.Expr:
    check_arity("TIME_EXTRACT", args, 2, 3)
    _utc_only("TIME_EXTRACT", args, 2)
    unit = (_literal(args, 1, "TIME_EXTRACT", "unit") or "").upper()
    if unit not in _EXTRACT:
        raise QueryError(f"TIME_EXTRACT: unit {unit!r} is not supported; use one of {', '.join(_EXTRACT)}",
                         "UNSUPPORTED_DRUID_SQL")
    return spark_sql(_EXTRACT[unit], _t=args[0])


def _time_parse(args: list[exp.Expr]) -> exp.Expr:
    check_arity("TIME_PARSE", args, 1, 3)
    _utc_only("TIME_PARSE", args, 2)
    pattern = _literal(args, 1, "TIME_PARSE", "pattern")
    if pattern is None:  # ISO-8601; Druid answers NULL for what does not parse
        return spark_sql("try_cast(_s AS TIMESTAMP)", _s=args[0])
    return spark_sql("try_to_timestamp(_s, _p)", _s=args[0], _p=exp.Literal.string(pattern))


def _time_format(args: list[exp.Expr]) -> exp.Expr:
    check_arity("TIME_FORMAT", args, 1, 3)
    _utc_only("TIME_FORMAT", args, 2)
    pattern = _literal(args, 1, "TIME_FORMAT", "pattern") or _ISO_FORMAT
    return spark_sql("date_format(_t, _p)", _t=args[0], _p=exp.Literal.string(pattern))


def _iso_instant(text: str) -> datetime:
    """An ISO 8601 instant as Druid reads one: a bare year or year-month is its first day; no offset is UTC."""
    padded = text + ("-01-01" if len(text) == 4 else "-01" if len(text) == 7 else "")
    moment = datetime.fromisoformat(padded)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _time_in_interval(args: list[exp.Expr]) -> exp.Expr:
    """TIME_IN_INTERVAL(t, 'start/end'): ``start <= t < end``; either end may be a period from the other."""
    check_arity("TIME_IN_INTERVAL", args, 2, 2)
    text = _literal(args, 1, "TIME_IN_INTERVAL", "interval") or ""
    parts = text.split("/")
    periods = [parse_period(p) for p in parts]
    try:
        if len(parts) != 2 or all(periods):
            raise ValueError(text)
        times = [None if period else _iso_instant(p) for p, period in zip(parts, periods, strict=True)]
    except ValueError:
        raise QueryError(f"TIME_IN_INTERVAL: {text!r} is not an ISO 8601 interval (start/end, start/period or "
                         "period/end)", "UNSUPPORTED_DRUID_SQL") from None
    bounds = [f"TIMESTAMP '{t:%Y-%m-%d %H:%M:%S.%f}'" if t else "" for t in times]
    for i, period in enumerate(periods):
        if period:
            sign = "+" if i else "-"
            bounds[i] = f"{bounds[1 - i]} {sign} INTERVAL {period[0]} {period[1]}"
    return exp.Paren(this=spark_sql(f"_t >= {bounds[0]} AND _t < {bounds[1]}", _t=args[0]))


def _operator(druid_name: str, template: str, arity: int) -> Callable[[list[exp.Expr]], exp.Expr]:
    """A Druid function that is a Spark expression (``_a``, ``_b``: its arguments)."""
    def translate_call(args: list[exp.Expr]) -> exp.Expr:
        check_arity(druid_name, args, arity, arity)
        return spark_sql(template, **dict(zip(("_a", "_b"), args, strict=False)))
    return translate_call


def _rename(druid_name: str, spark_name: str, arity: int) -> Callable[[list[exp.Expr]], exp.Expr]:
    """A Druid function that is a Spark function under another name."""
    def translate_call(args: list[exp.Expr]) -> exp.Expr:
        check_arity(druid_name, args, arity, arity)
        return exp.Anonymous(this=spark_name, expressions=[a.copy() for a in args])
    return translate_call


def _by_time(druid_name: str, spark_name: str, by_argument: bool) -> Callable[[list[exp.Expr]], exp.Expr]:
    """LATEST/EARLIEST(expr[, maxBytes]) by ``__time``; LATEST_BY/EARLIEST_BY(expr, time[, maxBytes])."""
    def translate_call(args: list[exp.Expr]) -> exp.Expr:
        low = 2 if by_argument else 1
        check_arity(druid_name, args, low, low + 1)
        by = args[1] if by_argument else exp.column("__time", quoted=True)
        if isinstance(by, exp.Column) and by.name != "__time":  # no other column of a datasource is a TIMESTAMP
            raise QueryError(f"{druid_name}: the time argument must be a TIMESTAMP, such as __time or "
                             f"MILLIS_TO_TIMESTAMP({by.name}); {by.name} is not", "UNSUPPORTED_DRUID_SQL")
        return exp.Anonymous(this=spark_name, expressions=[args[0].copy(), by.copy()])
    return translate_call


def any_value(node: exp.Anonymous) -> exp.Expr:
    """ANY_VALUE(expr[, maxBytes]): over a datasource, the earliest row's, as Druid's scan meets rows first."""
    args = list(node.expressions)
    check_arity("ANY_VALUE", args, 1, 2)
    select = node.find_ancestor(exp.Select) or exp.Select()
    source = select.args.get("from_")
    table = source.this if source is not None else None
    ctes = {cte.alias_or_name.lower() for cte in node.root().find_all(exp.CTE)}
    over_table = (isinstance(table, exp.Table) and not select.args.get("joins") and not select.args.get("laterals")
                  and table.db.lower() not in ("sys", "information_schema") and table.name.lower() not in ctes
                  and not table.name.startswith("__druid_"))  # a datasource: it has __time
    value: exp.Expr = exp.Anonymous(this="min_by", expressions=[args[0].copy(), exp.column("__time", quoted=True)]) \
        if over_table else exp.Anonymous(this="any_value", expressions=[args[0].copy()])
    if len(args) == 2:
        chars = integer_argument(args, 1, "ANY_VALUE", "maxBytes", 1024, 0, 2**31 - 1)
        value = exp.Anonymous(this="left", expressions=[value, exp.Literal.number(chars)])
    return value


def integer_argument(args: list[exp.Expr], index: int, function: str, what: str, default: int, low: int,
                     high: int) -> int:
    """An integer literal argument in ``[low, high]`` (``default`` when absent)."""
    if index >= len(args):
        return default
    value = args[index]
    if not (isinstance(value, exp.Literal) and value.is_int and low <= int(value.this) <= high):
        raise QueryError(f"{function}: the {what} must be an integer literal from {low} to {high}",
                         "UNSUPPORTED_DRUID_SQL")
    return int(value.this)


def _approx_distinct_hll(args: list[exp.Expr]) -> exp.Expr:
    """Spark's HLL++ at the relative error of Druid's HLL sketch of ``lgK`` (1.04 / sqrt(2^lgK))."""
    check_arity("APPROX_COUNT_DISTINCT_DS_HLL", args, 1, 3)
    lg_k = integer_argument(args, 1, "APPROX_COUNT_DISTINCT_DS_HLL", "lgK", 12, 4, 21)
    if (_literal(args, 2, "APPROX_COUNT_DISTINCT_DS_HLL", "tgtHllType") or "HLL_4") not in ("HLL_4", "HLL_6",
                                                                                            "HLL_8"):
        raise QueryError("APPROX_COUNT_DISTINCT_DS_HLL: tgtHllType must be HLL_4, HLL_6 or HLL_8",
                         "UNSUPPORTED_DRUID_SQL")
    return _approx_distinct(args[0], 1.04 / 2 ** (lg_k / 2))


def _approx_distinct_theta(args: list[exp.Expr]) -> exp.Expr:
    """Spark's HLL++ at the relative error of Druid's theta sketch of ``size`` entries (1 / sqrt(size))."""
    check_arity("APPROX_COUNT_DISTINCT_DS_THETA", args, 1, 2)
    size = integer_argument(args, 1, "APPROX_COUNT_DISTINCT_DS_THETA", "size", 16384, 16, 2**26)
    if size & (size - 1):
        raise QueryError("APPROX_COUNT_DISTINCT_DS_THETA: the size must be a power of 2", "UNSUPPORTED_DRUID_SQL")
    return _approx_distinct(args[0], 1 / size ** 0.5)


def _approx_distinct(value: exp.Expr, relative_error: float) -> exp.Expr:
    """A sketch's distinct count; as DataSketches, it skips the empty string."""
    return exp.Anonymous(this="approx_count_distinct",
                         expressions=[sketch_argument(value), exp.Literal.number(round(relative_error, 6))])


def _approx_quantile(args: list[exp.Expr]) -> exp.Expr:
    """Spark's percentile sketch with a rank error of 0.01%, within any quantiles sketch's (k <= 32768)."""
    return exp.Anonymous(this="percentile_approx", expressions=[
        spark_sql("CAST(_v AS DOUBLE)", _v=args[0]), quantile_probability(args), exp.Literal.number(10_000)])


def quantile_probability(args: list[exp.Expr]) -> exp.Expr:
    """APPROX_QUANTILE_DS's probability argument (and its arity checked)."""
    check_arity("APPROX_QUANTILE_DS", args, 2, 3)
    integer_argument(args, 2, "APPROX_QUANTILE_DS", "k", 128, 2, 32768)
    probability = args[1]
    if not (isinstance(probability, exp.Literal) and not probability.is_string
            and 0 <= float(probability.this) <= 1):
        raise QueryError("APPROX_QUANTILE_DS: the probability must be a number literal from 0 to 1",
                         "UNSUPPORTED_DRUID_SQL")
    return probability.copy()

DRUID_FUNCTIONS: dict[str, Callable[[list[exp.Expr]], exp.Expr]] = {
    "TIME_FLOOR": _time_floor, "TIME_CEIL": _time_ceil, "TIME_SHIFT": _time_shift, "TIME_EXTRACT": _time_extract,
    "TIME_PARSE": _time_parse, "TIME_FORMAT": _time_format,
    "MILLIS_TO_TIMESTAMP": _rename("MILLIS_TO_TIMESTAMP", "timestamp_millis", 1),
    "TIMESTAMP_TO_MILLIS": _rename("TIMESTAMP_TO_MILLIS", "unix_millis", 1),
    "LATEST": _by_time("LATEST", "max_by", False), "EARLIEST": _by_time("EARLIEST", "min_by", False),
    "LATEST_BY": _by_time("LATEST_BY", "max_by", True), "EARLIEST_BY": _by_time("EARLIEST_BY", "min_by", True),
    "STRLEN": _rename("STRLEN", "length", 1), "TEXTCAT": _rename("TEXTCAT", "concat", 2),
    "CONTAINS_STRING": _rename("CONTAINS_STRING", "contains", 2),
    "APPROX_COUNT_DISTINCT_DS_HLL": _approx_distinct_hll, "APPROX_COUNT_DISTINCT_DS_THETA": _approx_distinct_theta,
    "APPROX_QUANTILE_DS": _approx_quantile, "TIME_IN_INTERVAL": _time_in_interval,
    "BITWISE_AND": _operator("BITWISE_AND", "_a & _b", 2), "BITWISE_OR": _operator("BITWISE_OR", "_a | _b", 2),
    "BITWISE_XOR": _operator("BITWISE_XOR", "_a ^ _b", 2),
    "BITWISE_COMPLEMENT": _operator("BITWISE_COMPLEMENT", "~_a", 1),
    "BITWISE_SHIFT_LEFT": _operator("BITWISE_SHIFT_LEFT", "shiftleft(_a, _b)", 2),
    "BITWISE_SHIFT_RIGHT": _operator("BITWISE_SHIFT_RIGHT", "shiftright(_a, _b)", 2),
    "APPROX_COUNT_DISTINCT_BUILTIN": _rename("APPROX_COUNT_DISTINCT_BUILTIN", "approx_count_distinct", 1),
    "DECODE_BASE64_UTF8": _operator("DECODE_BASE64_UTF8", "CAST(unbase64(_a) AS STRING)", 1),
}

_SKETCH_FUNCTIONS = frozenset({"APPROX_COUNT_DISTINCT_DS_HLL", "APPROX_COUNT_DISTINCT_DS_THETA", "APPROX_QUANTILE_DS",
                               "DS_HLL", "DS_THETA"})
_BY_TIME = {"EARLIEST": "min_by", "EARLIEST_BY": "min_by", "LATEST": "max_by", "LATEST_BY": "max_by"}


def complex_argument(node: exp.Expr) -> exp.Column | None:
    """The column a function that reads sketch or first/last columns differently is over, if a column.

    Those functions: the sketch functions, ``APPROX_COUNT_DISTINCT``, ``COUNT(DISTINCT)``, ``EARLIEST``
    and ``LATEST`` (and their ``_BY`` forms).
    """
    if (isinstance(node, exp.Anonymous) and str(node.this).upper() in _SKETCH_FUNCTIONS | _BY_TIME.keys()
            and node.expressions):
        argument = node.expressions[0]
    elif isinstance(node, exp.ApproxDistinct):
        argument = node.this
    elif isinstance(node, exp.Count) and isinstance(node.this, exp.Distinct) and len(node.this.expressions) == 1:
        argument = node.this.expressions[0]
    else:
        return None
    return argument if isinstance(argument, exp.Column) else None


def over_complex(node: exp.Expr, column: exp.Column, kind: str) -> exp.Expr:
    """``node`` (see :func:`complex_argument`) over a column of stored sketches or first/last pairs.

    Sketches merge into the answer; ``EARLIEST``/``LATEST`` (``_BY``) take the value of the
    pair with the earliest (latest) stored time, the record's own, as Druid does.
    """
    function = str(node.this).upper() if isinstance(node, exp.Anonymous) else "COUNT(DISTINCT)"
    args = list(node.expressions) if isinstance(node, exp.Anonymous) else [column]
    pairs = kind.startswith("pair:")
    if pairs != (function in _BY_TIME):
        what, use = ("first/last values", "EARLIEST or LATEST") if pairs else ("sketches", "a sketch function")
        raise QueryError(f"{function} over {column.name}, a column of {what}: use {use}", "UNSUPPORTED_DRUID_SQL")
    return _over_pairs(function, args, column, kind) if pairs else _over_sketches(function, args, column, kind)


def _over_pairs(function: str, args: list[exp.Expr], column: exp.Column, kind: str) -> exp.Expr:
    """EARLIEST/LATEST (``_BY``) over first/last pairs: the value of the earliest (latest) stored time.

    Pairs are ordered as ingestion and compaction order them (:func:`indexing_task.metric_sql.pair_order`):
    time, offset (-1 where not stored), a null value first, the value.
    """
    def field(name: str) -> exp.Expr:
        return exp.Dot.build([column.copy(), exp.to_identifier(name, quoted=True)])

    order = spark_sql("CASE WHEN _pair IS NOT NULL THEN named_struct('t', _t, 'o', coalesce(_o, -1), 'n', "
                      "_v IS NOT NULL, 'v', _v) END", _pair=column, _t=field("lhs"), _o=field("offset"),
                      _v=field("rhs"))
    picked = exp.Anonymous(this=_BY_TIME[function], expressions=[field("rhs"), order])
    size = 2 if function.endswith("_BY") else 1  # maxBytes: Druid cuts a string to it when querying too
    if kind == "pair:string" and len(args) > size:
        chars = integer_argument(args, size, function, "maxBytes", 1024, 0, 2**31 - 1)
        return exp.Anonymous(this="left", expressions=[picked, exp.Literal.number(chars)])
    return picked


def _over_sketches(function: str, args: list[exp.Expr], column: exp.Column, kind: str) -> exp.Expr:
    """A distinct count or quantile over stored sketches: they merge into the answer."""
    sketch = Sketch.parse(kind)
    wanted = {"theta": "APPROX_COUNT_DISTINCT_DS_THETA", "hll": "APPROX_COUNT_DISTINCT_DS_HLL",
              "kll": "APPROX_QUANTILE_DS"}[sketch.family]
    if function in _SKETCH_FUNCTIONS - {wanted} or (sketch.family == "kll" and function != wanted):
        raise QueryError(f"{function} over {column.name}, a column of {sketch.family.upper()} sketches: use "
                         f"{wanted}", "UNSUPPORTED_DRUID_SQL")
    if sketch.family == "kll":
        return spark_sql("kll_sketch_get_quantile_double(kll_merge_agg_double(_c), _p)", _c=column,
                         _p=quantile_probability(args))
    if sketch.family == "hll":
        check_arity(function, args, 1, 3)
        return spark_sql("hll_sketch_estimate(hll_union_agg(_c, true))", _c=column)
    check_arity(function, args, 1, 2)
    size = integer_argument(args, 1, function, "size", sketch.size, 16, 2**26)
    return spark_sql("theta_sketch_estimate(theta_union_agg(_c, _k))", _c=column,
                     _k=exp.Literal.number(Sketch("theta", size).lg_size))
