"""DuckDB SQL for granularity buckets: the rule of :class:`specs.granularity.Granularity`, in SQL."""

from __future__ import annotations

from datetime import datetime, timedelta

from specs.granularity import ALL_END, ALL_START, Granularity

__all__ = ["bucket_end", "bucket_end_sql", "bucket_start_sql"]


def bucket_start_sql(granularity: Granularity, t: str) -> str:
    """DuckDB SQL for the start of the bucket holding timestamp ``t`` (the rule of ``Granularity.truncate``)."""
    g = granularity
    if g.kind == "none":
        return f"epoch_ms(epoch_ms({t}))"  # keep millisecond precision, as Druid does
    if g.kind == "all":
        return f"TIMESTAMP '{ALL_START:%Y-%m-%d}'"
    origin = f"TIMESTAMP '{g.origin:%Y-%m-%d}'"
    if g.months:
        return f"time_bucket(INTERVAL {g.months} MONTH, {t}, {origin})"
    if g.days:
        return f"time_bucket(INTERVAL {g.days} DAY, {t}, {origin})"
    return f"time_bucket(to_milliseconds({g.millis}), {t}, {origin})"


def bucket_end_sql(granularity: Granularity, start: str) -> str:
    """DuckDB SQL for the exclusive end of the bucket starting at ``start`` (``Granularity.bucket_end``)."""
    g = granularity
    if g.kind == "all":
        return f"TIMESTAMP '{ALL_END:%Y-%m-%d}'"
    if g.kind == "none":
        return f"{start} + INTERVAL 1 MILLISECOND"
    if g.months:
        return f"{start} + INTERVAL {g.months} MONTH"
    if g.days:
        return f"{start} + INTERVAL {g.days} DAY"
    return f"{start} + to_milliseconds({g.millis})"


def bucket_end(granularity: Granularity, start: datetime) -> datetime | None:
    """:func:`bucket_end_sql`'s answer for a naive UTC ``start``, without a query; None for months (ask DuckDB)."""
    g = granularity
    if g.kind == "all":
        return ALL_END.replace(tzinfo=None)
    if g.kind == "none":
        return start + timedelta(milliseconds=1)
    if g.months:
        return None  # a month's length depends on the month; DuckDB's rule, not restated here
    return start + timedelta(days=g.days, milliseconds=g.millis)
