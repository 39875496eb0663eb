"""ISO-8601 periods, durations and timestamps as Druid specs write them.

Druid reads ``taskDuration``, ``period`` and friends as Joda periods such as
``PT1H``, ``PT30S``, ``P1D`` or ``PT0.5S``.  Here they become
:class:`datetime.timedelta`; a period with months or years has no fixed length,
so it is rejected as a duration (granularities accept it, see
:mod:`specs.granularity`).  Letters are case-insensitive (``PT10m`` is fine).
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Annotated

from pydantic import BeforeValidator, PlainSerializer

from specs.spec_errors import SpecError, json_type_name

__all__ = [
    "IsoDuration",
    "PeriodParts",
    "UtcTimestamp",
    "format_iso_duration",
    "format_utc_timestamp",
    "parse_iso_duration",
    "parse_iso_period",
    "parse_utc_timestamp",
    "parse_utc_interval",
    "plus_period",
]

_PERIOD_RE = re.compile(
    r"P(?:(?P<years>\d+)Y)?(?:(?P<months>\d+)M)?(?:(?P<weeks>\d+)W)?(?:(?P<days>\d+)D)?"
    r"(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?"
)
_MICROS_PER_SECOND = 1_000_000


@dataclass(frozen=True)
class PeriodParts:
    """An ISO-8601 period split into its calendar-dependent and fixed parts."""

    months: int
    """Years times 12 plus months."""
    days: int
    """Weeks times 7 plus days."""
    micros: int
    """Hours, minutes and seconds, in microseconds."""


def parse_iso_period(text: str) -> PeriodParts:
    """Parse ``PnYnMnWnDTnHnMnS`` (each part optional, seconds may be fractional).

    Raises :class:`SpecError` (with an empty path) for anything else, including
    negative and empty periods.
    """
    upper = text.strip().upper()
    if "-" in upper:
        raise SpecError.at("", f"negative periods are not supported, got {text!r}")
    match = _PERIOD_RE.fullmatch(upper)
    if match is None or upper in ("P", "PT") or upper.endswith("T"):
        raise SpecError.at("", f"not an ISO-8601 period such as PT1H or P1D, got {text!r}")
    parts = {name: value for name, value in match.groupdict().items() if value is not None}
    seconds = Decimal(parts.get("seconds", "0")) * _MICROS_PER_SECOND
    if seconds != seconds.to_integral_value():
        raise SpecError.at("", f"periods finer than a microsecond are not supported, got {text!r}")
    micros = (int(parts.get("hours", 0)) * 3600 + int(parts.get("minutes", 0)) * 60) * _MICROS_PER_SECOND
    return PeriodParts(
        months=int(parts.get("years", 0)) * 12 + int(parts.get("months", 0)),
        days=int(parts.get("weeks", 0)) * 7 + int(parts.get("days", 0)),
        micros=micros + int(seconds),
    )


def parse_iso_duration(text: str) -> timedelta:
    """Parse an ISO-8601 duration such as ``PT1H``, ``P1D``, ``P1W`` or ``PT0.5S``.

    Months and years are rejected: they have no fixed length.
    """
    parts = parse_iso_period(text)
    if parts.months:
        raise SpecError.at("", f"months and years are not allowed in a duration, got {text!r}")
    return timedelta(days=parts.days, microseconds=parts.micros)


def format_iso_duration(value: timedelta) -> str:
    """Write a timedelta the way Druid writes periods: ``PT1H``, ``P1DT30M``, ``PT0.5S``."""
    if value < timedelta(0):
        raise ValueError(f"negative durations cannot be written as ISO-8601 periods: {value}")
    days = value.days
    rest = value.seconds
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    out = f"P{days}D" if days else "P"
    clock = ""
    if hours:
        clock += f"{hours}H"
    if minutes:
        clock += f"{minutes}M"
    if seconds or value.microseconds:
        whole = Decimal(seconds) + Decimal(value.microseconds) / _MICROS_PER_SECOND
        text = format(whole.normalize(), "f")
        clock += f"{text}S"
    if clock:
        out += "T" + clock
    return out if out != "P" else "PT0S"


def parse_utc_interval(text: str) -> tuple[datetime, datetime]:
    """``START/END``, ``START/PERIOD`` or ``PERIOD/END`` in ISO-8601, like Druid's intervals (``2014-02-02/p4w``).

    Times are UTC unless an offset is given.
    Raises ``ValueError`` with a message saying what was expected.
    """
    try:
        first, second = text.split("/")
        if first[:1] in ("p", "P"):
            end = _instant(second)
            start = plus_period(end, parse_iso_period(first), -1)
        else:
            start = _instant(first)
            end = plus_period(start, parse_iso_period(second), 1) if second[:1] in ("p", "P") else _instant(second)
    except (ValueError, SpecError):
        raise ValueError(f"expected START/END, START/PERIOD or PERIOD/END in ISO-8601, got {text!r}") from None
    if not start < end:
        raise ValueError(f"expected START before END, got {text!r}")
    return start, end


def _instant(text: str) -> datetime:
    """An ISO-8601 time of an interval; a year (``2000``) or a month (``2000-05``) alone is its start, as in Joda."""
    if re.fullmatch(r"\d{4}(-\d{2})?", text):
        text += "-01" * (2 if len(text) == 4 else 1)
    value = datetime.fromisoformat(text)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def plus_period(value: datetime, period: PeriodParts, sign: int) -> datetime:
    """``value`` plus (``sign`` 1) or minus (-1) ``period``: months first, the day clamped to the month's last."""
    index = value.year * 12 + value.month - 1 + sign * period.months
    year, month = divmod(index, 12)
    day = min(value.day, calendar.monthrange(year, month + 1)[1])
    moved = value.replace(year=year, month=month + 1, day=day)
    return moved + sign * timedelta(days=period.days, microseconds=period.micros)


def parse_utc_timestamp(text: str) -> datetime:
    """Parse an ISO-8601 timestamp; without an offset it is taken as UTC (Druid's default zone)."""
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        raise SpecError.at("", f"not an ISO-8601 timestamp, got {text!r}") from None
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def format_utc_timestamp(value: datetime) -> str:
    """Write a UTC timestamp as ISO-8601 with a ``Z`` suffix."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _duration_input(value: object) -> object:
    if isinstance(value, timedelta):
        if value < timedelta(0):
            raise SpecError.at("", f"durations may not be negative, got {value}")
        return value
    if not isinstance(value, str):
        raise SpecError.at(
            "", f"expected an ISO-8601 duration string such as PT1H, got {json_type_name(value)}"
        )
    return parse_iso_duration(value)


def _timestamp_input(value: object) -> object:
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    if not isinstance(value, str):
        raise SpecError.at("", f"expected an ISO-8601 timestamp string, got {json_type_name(value)}")
    return parse_utc_timestamp(value)


IsoDuration = Annotated[
    timedelta,
    BeforeValidator(_duration_input),
    PlainSerializer(format_iso_duration, return_type=str, when_used="json"),
]
"""A model field holding an ISO-8601 duration (read from and written as a string)."""

UtcTimestamp = Annotated[
    datetime,
    BeforeValidator(_timestamp_input),
    PlainSerializer(format_utc_timestamp, return_type=str, when_used="json"),
]
"""A model field holding a UTC-aware timestamp (read from and written as ISO-8601)."""
