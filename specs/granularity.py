"""Druid granularities as a small frozen value type, with UTC bucketing.

Accepted spellings (names are case-insensitive):

* Druid's simple names: ``NONE``, ``ALL``, ``SECOND``, ``MINUTE``, ``FIVE_MINUTE``,
  ``TEN_MINUTE``, ``FIFTEEN_MINUTE``, ``THIRTY_MINUTE``, ``HOUR``, ``SIX_HOUR``,
  ``EIGHT_HOUR``, ``DAY``, ``WEEK``, ``MONTH``, ``QUARTER``, ``YEAR``;
* a bare ISO-8601 period string such as ``"PT2H"`` (an extension; Druid wants the object);
* ``{"type": "period", "period": "PT1H", "timeZone": "UTC", "origin": ...}``;
* ``{"type": "duration", "duration": 3600000, "origin": ...}`` (milliseconds);
* ``{"type": "none"}`` and ``{"type": "all"}``.

Only UTC is supported: ``timeZone`` must be ``UTC``, ``Etc/UTC`` or ``Z`` and
``origin`` must be the epoch.  A period must be a single kind of unit: months
(and years), days (and weeks) or a fixed number of milliseconds; ``P1DT1H`` is
rejected.

Bucket alignment: millisecond periods are aligned to the epoch; day periods
that are whole weeks are aligned to Monday 1970-01-05 (ISO weeks), other day
periods to 1970-01-01; month periods are aligned to calendar months counted
from January 1970, so ``P3M`` gives calendar quarters and ``P1Y`` calendar years.
``NONE`` buckets are single milliseconds.  ``ALL`` is one bucket from
``1000-01-01T00:00Z`` (inclusive) to ``3000-01-01T00:00Z`` (exclusive); Druid uses
a wider range, but these bounds are what this service writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

from specs.durations import parse_iso_period, parse_utc_timestamp
from specs.spec_errors import SpecError, json_type_name

__all__ = ["ALL_END", "ALL_START", "Granularity", "GranularityKind"]

GranularityKind = Literal["none", "all", "period"]

ALL_START = datetime(1000, 1, 1, tzinfo=UTC)
"""Start of the single ``ALL`` bucket."""
ALL_END = datetime(3000, 1, 1, tzinfo=UTC)
"""Exclusive end of the single ``ALL`` bucket."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FIRST_MONDAY = datetime(1970, 1, 5, tzinfo=UTC)
_MINUTE = 60_000
_HOUR = 60 * _MINUTE

# name -> (months, days, millis)
_NAMED: dict[str, tuple[int, int, int]] = {
    "SECOND": (0, 0, 1_000),
    "MINUTE": (0, 0, _MINUTE),
    "FIVE_MINUTE": (0, 0, 5 * _MINUTE),
    "TEN_MINUTE": (0, 0, 10 * _MINUTE),
    "FIFTEEN_MINUTE": (0, 0, 15 * _MINUTE),
    "THIRTY_MINUTE": (0, 0, 30 * _MINUTE),
    "HOUR": (0, 0, _HOUR),
    "SIX_HOUR": (0, 0, 6 * _HOUR),
    "EIGHT_HOUR": (0, 0, 8 * _HOUR),
    "DAY": (0, 1, 0),
    "WEEK": (0, 7, 0),
    "MONTH": (1, 0, 0),
    "QUARTER": (3, 0, 0),
    "YEAR": (12, 0, 0),
}
_NAME_OF = {parts: name for name, parts in _NAMED.items()}
_UTC_ZONES = {"UTC", "ETC/UTC", "Z"}
_OBJECT_KEYS = {
    "period": {"type", "period", "timeZone", "origin"},
    "duration": {"type", "duration", "origin"},
}


@dataclass(frozen=True)
class Granularity:
    """A bucketing of UTC time: ``none`` (milliseconds), ``all`` (one bucket) or a ``period``.

    For a period exactly one of ``months``, ``days`` and ``millis`` is positive.
    """

    kind: GranularityKind
    months: int = 0
    days: int = 0
    millis: int = 0

    def __post_init__(self) -> None:
        units = (self.months, self.days, self.millis)
        if self.kind != "period":
            if any(units):
                raise SpecError.at("", f"a {self.kind!r} granularity takes no period")
        elif any(unit < 0 for unit in units) or sum(1 for unit in units if unit) != 1:
            raise SpecError.at(
                "", "a period granularity needs exactly one positive unit: months, days or millis"
            )

    # ----------------------------------------------------------------- parsing

    @classmethod
    def parse(cls, value: object) -> Granularity:
        """Read a granularity from its JSON form (a name, an ISO period or an object)."""
        if isinstance(value, Granularity):
            return value
        if isinstance(value, str):
            return cls._from_string(value)
        if isinstance(value, dict):
            return cls._from_object(value)
        raise SpecError.at(
            "", f"expected a granularity name such as HOUR or an object, got {json_type_name(value)}"
        )

    @classmethod
    def _from_string(cls, text: str) -> Granularity:
        name = text.strip().upper()
        if name in ("NONE", "ALL"):
            return cls("none" if name == "NONE" else "all")
        if name in _NAMED:
            months, days, millis = _NAMED[name]
            return cls("period", months, days, millis)
        if name.lstrip("+-").startswith("P"):
            return cls._from_period(text)
        known = ", ".join(["NONE", "ALL", *_NAMED])
        raise SpecError.at("", f"unknown granularity {text!r}; expected one of {known} or an ISO-8601 period")

    @classmethod
    def _from_period(cls, text: str) -> Granularity:
        parts = parse_iso_period(text)
        if parts.micros % 1000:
            raise SpecError.at("", f"granularity periods must be whole milliseconds, got {text!r}")
        units = (parts.months, parts.days, parts.micros // 1000)
        if not any(units):
            raise SpecError.at("", f"a granularity period must be positive, got {text!r}")
        if sum(1 for unit in units if unit) > 1:
            raise SpecError.at(
                "",
                f"combined period {text!r} is not supported: use only months/years, only weeks/days "
                "or only hours/minutes/seconds",
            )
        return cls("period", *units)

    @classmethod
    def _from_object(cls, obj: dict[Any, Any]) -> Granularity:
        kind = obj.get("type")
        if not isinstance(kind, str):
            raise SpecError.at(
                "type", "a granularity object needs a string 'type': period, duration, none or all"
            )
        kind = kind.lower()
        if kind in ("none", "all"):
            extra = sorted(str(key) for key in obj if key != "type")
            if extra:
                raise SpecError.at(extra[0], f"unexpected field in a {kind!r} granularity")
            return cls("none") if kind == "none" else cls("all")
        if kind not in _OBJECT_KEYS:
            raise SpecError.at(
                "type", f"unknown granularity type {obj['type']!r}; expected period, duration, none or all"
            )
        for key in obj:
            if key not in _OBJECT_KEYS[kind]:
                raise SpecError.at(str(key), f"unexpected field in a {kind!r} granularity")
        _check_utc(obj)
        if kind == "duration":
            millis = obj.get("duration")
            if isinstance(millis, bool) or not isinstance(millis, int):
                raise SpecError.at(
                    "duration", f"expected a number of milliseconds, got {json_type_name(millis)}"
                )
            if millis <= 0:
                raise SpecError.at("duration", f"must be > 0, got {millis}")
            return cls("period", millis=millis)
        period = obj.get("period")
        if not isinstance(period, str):
            raise SpecError.at("period", f"expected an ISO-8601 period string, got {json_type_name(period)}")
        try:
            return cls._from_period(period)
        except SpecError as exc:
            raise exc.prefixed("period") from None

    # ----------------------------------------------------------------- display

    @property
    def name(self) -> str:
        """Druid's simple name when there is one (``HOUR``, ``NONE``), else the ISO period (``PT2H``)."""
        if self.kind != "period":
            return self.kind.upper()
        return _NAME_OF.get((self.months, self.days, self.millis)) or self.iso_period

    @property
    def iso_period(self) -> str:
        """The ISO-8601 period of a ``period`` granularity (``PT15M``, ``P1D``, ``P3M``); ``""`` otherwise."""
        if self.kind != "period":
            return ""
        if self.months:
            return f"P{self.months // 12}Y" if self.months % 12 == 0 else f"P{self.months}M"
        if self.days:
            return f"P{self.days // 7}W" if self.days % 7 == 0 else f"P{self.days}D"
        return _millis_period(self.millis)

    def to_json(self) -> str | dict[str, str]:
        """Return the Druid JSON form: a simple name, or ``{"type": "period", "period": ...}``."""
        name = self.name
        if self.kind != "period" or name in _NAMED:
            return name
        return {"type": "period", "period": self.iso_period}

    def __str__(self) -> str:
        return self.name

    # ----------------------------------------------------------------- bucketing

    @property
    def origin(self) -> datetime:
        """Where a period's buckets are counted from.

        Months from January 1970, weeks from the first Monday (1970-01-05), days and smaller
        units from the epoch.
        """
        return _FIRST_MONDAY if self.days and self.days % 7 == 0 else _EPOCH

    def truncate(self, dt: datetime) -> datetime:
        """Start of the bucket holding ``dt`` (a timezone-aware datetime; the result is in UTC)."""
        if dt.tzinfo is None:
            raise ValueError("Granularity.truncate needs a timezone-aware datetime")
        dt = dt.astimezone(UTC)
        if self.kind == "all":
            return ALL_START
        if self.kind == "none":
            return dt.replace(microsecond=dt.microsecond - dt.microsecond % 1000)
        origin = self.origin
        if self.months:
            months = (dt.year - origin.year) * 12 + dt.month - origin.month
            return _plus_months(origin, months - months % self.months)
        step = timedelta(days=self.days, milliseconds=self.millis)
        return origin + (dt - origin) // step * step

    def bucket_end(self, start: datetime) -> datetime:
        """Exclusive end of the bucket holding ``start`` (normally a bucket start)."""
        begin = self.truncate(start)
        if self.kind == "all":
            return ALL_END
        if self.kind == "none":
            return begin + timedelta(milliseconds=1)
        if self.months:
            return _plus_months(begin, self.months)
        return begin + timedelta(days=self.days, milliseconds=self.millis)

    def nests_in(self, outer: Granularity) -> bool:
        """Whether every bucket of this granularity lies within one bucket of ``outer``."""
        if self.kind == "none" or outer.kind == "all":
            return True
        if self.kind == "all" or outer.kind == "none":
            return False
        if self.months:
            return outer.months > 0 and outer.months % self.months == 0
        step = (self.days * 86_400_000 + self.millis)
        if outer.months:  # months start at midnight: the step must divide a day, counted from the epoch
            return self.origin == _EPOCH and 86_400_000 % step == 0
        offset = (outer.origin - self.origin) // timedelta(milliseconds=1)
        return (outer.days * 86_400_000 + outer.millis) % step == 0 and offset % step == 0

    # ----------------------------------------------------------------- pydantic

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        json_form = core_schema.union_schema(
            [
                core_schema.str_schema(),
                core_schema.dict_schema(core_schema.str_schema(), core_schema.any_schema()),
            ]
        )
        return core_schema.no_info_plain_validator_function(
            cls.parse,
            json_schema_input_schema=json_form,
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda value: value.to_json(), when_used="json", return_schema=json_form
            ),
        )


def _plus_months(start: datetime, months: int) -> datetime:
    """Return the first day of the month ``months`` after ``start``'s month (UTC)."""
    index = start.year * 12 + start.month - 1 + months
    return datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC)


def _millis_period(millis: int) -> str:
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, rest = divmod(rest, 1000)
    out = "PT"
    if hours:
        out += f"{hours}H"
    if minutes:
        out += f"{minutes}M"
    if seconds or rest:
        out += f"{seconds}.{rest:03d}".rstrip("0") + "S" if rest else f"{seconds}S"
    return out


def _check_utc(obj: dict[Any, Any]) -> None:
    zone = obj.get("timeZone")
    if zone is not None and (not isinstance(zone, str) or zone.strip().upper() not in _UTC_ZONES):
        raise SpecError.at("timeZone", f"only UTC is supported (UTC, Etc/UTC or Z), got {zone!r}")
    origin = obj.get("origin")
    if origin is None:
        return
    if not isinstance(origin, str):
        raise SpecError.at("origin", f"expected an ISO-8601 timestamp, got {json_type_name(origin)}")
    try:
        when = parse_utc_timestamp(origin)
    except SpecError as exc:
        raise exc.prefixed("origin") from None
    if when != _EPOCH:
        raise SpecError.at(
            "origin", f"only the epoch (1970-01-01T00:00:00Z) is supported as origin, got {origin!r}"
        )
