"""Which SQL functions a query may call, and how big their results can get.

A query may call only the functions named in :data:`ALLOWED_FUNCTIONS` (fail closed: a function
a new Spark version adds is refused until it is classified here). Each allowed function has a
size class:

- ``bounded``: its result is at most a constant or at most its largest input (comparisons, math,
  ``length``, ``upper``, ``substr``, dates, casts, hashes, ``coalesce``/``if``/``case``, JSON readers);
- ``additive``: at most the sum of its inputs (``concat``, ``array``, ``named_struct``, ``array_union``);
- ``sized``: the size comes from an argument (``repeat``, ``lpad``, ``space``, ``sequence``,
  ``format_string`` widths), which must be an integer literal (a literal format) within
  :data:`MAX_BUILT_SIZE`; or it multiplies its inputs (``replace``, ``regexp_replace``);
- ``lambda``: a higher-order function over an array or map (``transform``, ``filter``), bounded
  from its lambda's bound (below).

- ``collecting``: ``collect_list`` and ``collect_set`` (Druid's ``ARRAY_AGG``, ``STRING_AGG`` and
  ``LISTAGG`` become them), bounded by the rows they may read (below).

Spark's other row-collecting aggregates (``array_agg``, ``string_agg``, ``listagg``) and accumulating
higher-order functions (``aggregate``, ``reduce``) are not allowed: an accumulator's result grows with
its elements, which no plan check can bound. Neither are functions a Druid
user has no use for and whose failures are server-side (``aes_decrypt``, ``raise_error``), nor
readers of other formats (XML, CSV, Avro, Protobuf) or of the JVM (``reflect``).

**Value bounds.** Classes alone do not bound a query: ``concat(x, x)`` doubles a value per CTE or
subquery level. :func:`value_bound` computes an upper bound of every value's size over the
analyzed plan (abstract interpretation, per attribute by expression id), and the sandbox refuses a
query in which any value, intermediate ones included, may exceed :data:`MAX_VALUE_SIZE`. Sizes are
counted in characters for strings, bytes for binaries, and for arrays and maps their elements plus
8 per element (Spark's slot). The bounds are:

- a literal: its length; a value of a fixed-width type (number, boolean, date, time, interval):
  :data:`FIXED_SIZE`, whatever computed it (its inputs are still checked);
- a datasource column (or any attribute no plan node defines, such as a view's column) of a
  variable-width type: :data:`COLUMN_SIZE`, 1 MiB, Kafka's default largest record
  (``message.max.bytes``), which no single value of a row can exceed; or less, when the query is past
  the limit with that bound and the datasource's files bound the column's values lower
  (:mod:`overlord.query.value_sizes`: a column chunk's uncompressed size);
- an alias, a CTE reference, a union's column or a generator's output: the bound of what defines
  it (a union: the largest of its inputs);
- a function or operator: from its inputs' bounds by its Catalyst class (:data:`MULTIPLIERS`,
  :func:`_sized`), and by default the sum of its inputs plus 8 per input and a small constant
  (every allowed function is at most additive unless listed);
- a collecting aggregate: the rows its aggregate or window may read times its input's bound plus 8 per
  row. A datasource's rows are its files' (their footers', when the query is past the limit otherwise),
  a join's at most the product of its sides' (each plus one), a union's the sum, a generator's its input's
  times its array's elements; a range, or any source not counted so, may read any number of rows;
- a lambda function applied over an array of bound ``E`` (at most ``E / 8`` elements): by convexity
  of these bounds in the lambda variable's bound, at most ``count * (f(0) + 8) + f(E)``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

__all__ = ["ALLOWED_FUNCTIONS", "COLUMN_SIZE", "FIXED_SIZE", "MAX_BUILT_SIZE", "MAX_VALUE_SIZE", "SIZE_ARGUMENTS",
           "format_widths", "size_class"]

MAX_BUILT_SIZE = 10_000
"""The largest count, length or format width a value-building function may be given (characters or elements)."""

MAX_VALUE_SIZE = 16 * 1024 * 1024
"""The largest size a query's value may reach (:mod:`module docstring <overlord.query.function_bounds>`)."""

COLUMN_SIZE = 1024 * 1024
"""The bound of a datasource column's variable-width value: Kafka's default largest record."""

FIXED_SIZE = 48
"""The bound of a fixed-width value (its text form included: a DECIMAL(38) has 40 characters)."""

_BOUNDED = """
    ! != % & * + - / < << <= <=> = == > >= >> >>> ^ | ~ abs acos acosh add_months and any any_value
    approx_count_distinct approx_percentile ascii asin asinh atan atan2 atanh avg between bigint bin binary
    bit_and bit_count bit_get bit_length bit_or bit_xor bool_and bool_or boolean bround btrim cardinality cast cbrt
    ceil ceiling char char_length character_length chr coalesce contains conv convert_timezone corr cos cosh cot
    count count_if covar_pop covar_samp crc32 csc cume_dist curdate current_date current_timestamp current_timezone
    date date_add date_diff date_format date_from_unix_date date_part date_sub date_trunc dateadd datediff datepart
    day dayname dayofmonth dayofweek dayofyear decimal degrees dense_rank div double e element_at endswith
    equal_null every exp expm1 extract factorial find_in_set first first_value float floor from_unixtime
    from_utc_timestamp get get_json_object getbit greatest grouping grouping_id hash hex hll_sketch_estimate
    hll_union_agg hour hypot if ifnull ilike in initcap instr int isnan isnotnull isnull json_array_length
    kll_merge_agg_double kll_sketch_get_quantile_double kurtosis lag last last_day last_value lcase lead least
    left len length levenshtein like ln locate log log10 log1p log2 lower ltrim make_date make_dt_interval
    make_interval make_timestamp make_ym_interval max max_by md5 mean median min min_by minute mod month
    monthname months_between nanvl negative next_day not now nth_value ntile nullif nullifzero nvl nvl2
    octet_length or percent_rank percentile percentile_approx pi pmod position positive pow power quarter radians
    rank regexp regexp_count regexp_extract regexp_instr regexp_like regexp_substr reverse right rint rlike round
    row_number rtrim sec second sha sha1 sha2 shiftleft shiftright shiftrightunsigned sign signum sin sinh size
    skewness smallint some sort_array split_part sqrt startswith std stddev stddev_pop stddev_samp string substr
    substring substring_index sum tan tanh theta_sketch_estimate theta_union_agg timestamp timestamp_micros
    timestamp_millis timestamp_seconds tinyint to_date to_timestamp to_unix_timestamp to_utc_timestamp translate
    trim trunc try_add try_avg try_divide try_element_at try_mod try_multiply try_subtract try_sum try_to_timestamp
    typeof ucase unbase64 unhex unix_date unix_micros unix_millis unix_seconds unix_timestamp upper url_decode
    var_pop var_samp variance weekday weekofyear when width_bucket xxhash64 year zeroifnull
    array_contains array_max array_min array_position array_size arrays_overlap array_distinct array_remove
    array_compact array_sort slice flatten map_keys map_values map_contains_key shuffle
    base64 to_base32 from_base32 url_encode to_json quote split regexp_extract_all sentences
    timestampadd timestampdiff hll_sketch_agg theta_sketch_agg theta_intersection theta_difference
"""
_ADDITIVE = """
    theta_union concat concat_ws array array_append array_prepend array_insert array_union array_intersect array_except
    arrays_zip map map_concat map_from_arrays map_from_entries map_entries named_struct struct str_to_map elt
    overlay array_join explode explode_outer posexplode posexplode_outer inline inline_outer stack json_tuple
"""
_SIZED = "repeat space lpad rpad array_repeat sequence format_string printf replace regexp_replace"
_LAMBDA = "transform filter exists forall zip_with map_filter transform_keys transform_values map_zip_with"
_COLLECTING = "collect_list collect_set"

ALLOWED_FUNCTIONS: dict[str, str] = {
    name: kind for kind, names in (("bounded", _BOUNDED), ("additive", _ADDITIVE), ("sized", _SIZED),
                                   ("lambda", _LAMBDA), ("collecting", _COLLECTING)) for name in names.split()}
"""Every function a query may call (lower case), with its size class."""

SIZE_ARGUMENTS = {"repeat": (1,), "space": (0,), "lpad": (1,), "rpad": (1,), "array_repeat": (1,), "sequence": ()}
"""Value-building functions and the positions of their size arguments (``sequence``: its span)."""


def size_class(name: str) -> str | None:
    """The size class of an allowed function (lower-case name), None if it is not allowed."""
    return ALLOWED_FUNCTIONS.get(name)


_FORMAT_SPEC = re.compile(r"%(?:\d+\$)?[-#+ 0,(<]*(\d*)(?:\.(\d+))?[a-zA-Z%]")


def format_widths(fmt: str) -> list[int]:
    """The widths and precisions of a ``format_string`` format (``%0900d``: 900)."""
    return [int(group) for match in _FORMAT_SPEC.finditer(fmt) for group in match.groups() if group]


MULTIPLIERS = {
    "Hex": 2, "Base64": 2, "Base32": 2, "UrlEncode": 3, "Quote": 2, "StructsToJson": 6, "Encode": 4,
    "Decode": 4, "StringSplit": 9, "RegExpExtractAll": 9, "Sentences": 9, "GetJsonObject": 2, "DateFormatClass": 3,
}
"""Catalyst classes whose result may be larger than the sum of their inputs, and by how much at most."""

LAMBDA_CLASSES = frozenset({"ArrayTransform", "TransformKeys", "TransformValues", "ZipWith", "MapZipWith"})
"""Higher-order functions whose result has one lambda result per element."""

LARGEST_INPUT = frozenset({
    "If", "CaseWhen", "Coalesce", "NullIf", "Greatest", "Least", "First", "Last", "Min", "Max", "AnyValue",
    "MaxBy", "MinBy", "Lag", "Lead", "NthValue", "ElementAt", "TryElementAt", "Upper", "Lower", "Substring",
    "StringTrim", "StringTrimLeft", "StringTrimRight", "StringTrimBoth", "Reverse", "InitCap", "SubstringIndex",
    "SplitPart", "UnBase64", "Unhex", "UrlDecode", "RegExpExtract", "RegExpSubStr", "StringTranslate",
    "ArrayDistinct", "ArrayRemove", "ArrayCompact", "SortArray", "Slice", "Flatten", "Shuffle", "ArrayMax",
    "ArrayMin", "GetArrayItem", "GetMapValue", "GetStructField", "GetArrayStructFields", "MapKeys", "MapValues",
    "Alias", "SortOrder", "KnownNotNull", "KnownNullable", "PromotePrecision", "Nvl", "Nvl2",
})
"""Catalyst classes whose result is one of their inputs or a part of one."""

COLLECTING_CLASSES = frozenset({"CollectList", "CollectSet"})
"""Aggregates whose result holds one element per row they read."""

FILTER_CLASSES = frozenset({"ArrayFilter", "ArrayExists", "ArrayForAll", "MapFilter", "ArraySort"})
"""Higher-order functions whose result is at most their input (or a boolean)."""


def _literal(expr: Any, name: str) -> Any:
    return expr.value() if name == "Literal" else None


def _span(start: int, stop: int, step: int) -> int:
    return MAX_VALUE_SIZE + 1 if step == 0 or max(abs(start), abs(stop), abs(step)) > MAX_VALUE_SIZE else (
        abs(stop - start) // abs(step) + 1)


def sized(name: str, children: list[Any], names: list[str], bounds: list[int]) -> int | None:
    """The bound of a sized Catalyst expression from its children (JVM objects, class names, bounds).

    None when ``name`` is not a sized class.
    """
    def value(i: int) -> int:
        literal = _literal(children[i], names[i]) if i < len(children) else None
        if isinstance(literal, int) and not isinstance(literal, bool):
            return max(literal, 0)
        return MAX_VALUE_SIZE + 1  # not a literal: unbounded (the parse check refuses it first)

    def raw(i: int) -> int:
        literal = _literal(children[i], names[i]) if i < len(children) else None
        if isinstance(literal, int) and not isinstance(literal, bool):
            return literal
        return MAX_VALUE_SIZE + 1

    rules: dict[str, Callable[[], int]] = {
        "StringRepeat": lambda: bounds[0] * value(1),
        "StringSpace": lambda: value(0),
        "StringLPad": lambda: value(1), "StringRPad": lambda: value(1), "BinaryPad": lambda: value(1),
        "ArrayRepeat": lambda: (bounds[0] + 8) * value(1),
        "RandStr": lambda: value(0),
        "StringReplace": lambda: bounds[0] * (bounds[2] + 1) + bounds[2] if len(bounds) > 2 else bounds[0],
        "RegExpReplace": lambda: (bounds[0] + 1) * (bounds[2] + 1),
        "FormatString": lambda: sum(bounds) + 8 * len(bounds) + sum(format_widths(
            str(_literal(children[0], names[0]) or "")) if names[0] == "Literal" else [MAX_VALUE_SIZE]),
        "ArrayJoin": lambda: bounds[0] + (bounds[0] // 8 + 1) * sum(bounds[1:]),
        "Sequence": lambda: _span(raw(0), raw(1), raw(2) if len(children) > 2 else 1) * (FIXED_SIZE + 8),
        "ConcatWs": lambda: sum(bounds) + (sum(bounds[1:]) // 8 + len(bounds)) * bounds[0],
    }
    rule = rules.get(name)
    return None if rule is None else rule()
