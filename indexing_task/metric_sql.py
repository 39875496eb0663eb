"""SQL for first/last pairs and sketch inputs, and for long sums that wrap around as Druid's do."""

from __future__ import annotations

from indexing_task.field_sql import SQL_TYPES, cast_sql, metadata_column
from indexing_task.rollup_schema import Metric
from indexing_task.sql_text import quote_string as _lit

__all__ = ["pair_order", "pair_sql", "sketch_inputs", "wrapped_long"]


def sketch_inputs(column: str, family: str, rollup: bool, combine: bool) -> str:
    """SQL for a row's list of sketch inputs: values (distinct for theta and HLL), or sketches to merge."""
    if combine:
        return f"list({column})"
    if family == "kll":
        return f"list_filter({f'list({column})' if rollup else f'[{column}]'}, lambda v: v IS NOT NULL)"
    return f"list_distinct({f'flatten(list({column}))' if rollup else column})"


def pair_sql(i: int, value: str, m: Metric) -> tuple[str, str | None]:
    """First/last metric ``i``'s (time, value, offset) pair, as a column of the parse, and its type check (if any).

    A string is cut to ``max_chars`` and a null one is skipped (no pair), as Druid's string
    first/last do at ingestion; a null number is kept (the earliest value may be null).
    """
    offset = metadata_column("offset")
    if m.type == "string":
        cut = f"left({value}, {m.max_chars})"
        return (f"CASE WHEN {value} IS NOT NULL THEN {{'lhs': epoch_ms(__t), 'rhs': {cut}, 'offset': {offset}}} END",
                None)
    skipped = f"__mf{i} AND " if m.filter_json is not None else ""
    return (f"{{'lhs': epoch_ms(__t), 'rhs': {cast_sql(value, SQL_TYPES[m.type])}, 'offset': {offset}}}",
            f"WHEN {skipped}{value} IS NOT NULL AND __m{i}.rhs IS NULL "
            f"THEN {_lit('wrong type for ' + m.fields[0] + ' (' + m.type + ')')}")


def pair_order(pair: str) -> str:
    """SQL for the order of first/last pairs (NULL for no pair).

    The time, then the offset (on equal times the later record is the last, as in Druid), then a
    null value before any other, then the value (equal times and offsets in two partitions).
    Queries order pairs the same way (:mod:`overlord.query.druid_functions`); pairs written before
    offsets were stored have offset -1.
    """
    return (f"CASE WHEN {pair} IS NOT NULL THEN {{'t': struct_extract({pair}, 'lhs'), "
            f"'o': coalesce(struct_extract({pair}, 'offset'), -1), 'n': struct_extract({pair}, 'rhs') IS NOT NULL, "
            f"'v': struct_extract({pair}, 'rhs')}} END")


def wrapped_long(expr: str) -> str:
    """Return SQL for a sum as a 64-bit long that wraps around on overflow, as Druid's (Java's) long sums do."""
    wrapped = f"(((({expr})::HUGEINT + {2**63}) % {2**64} + {2**64}) % {2**64} - {2**63})"
    return f"coalesce(try_cast({expr} AS BIGINT), {wrapped})"  # the arithmetic only where it overflowed
