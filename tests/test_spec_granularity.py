"""Granularities: spellings, names, bucket starts and ends.

Needs no infrastructure and no fixtures.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from specs import (
    Granularity,
    SpecError,
)


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, micro: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)


# --------------------------------------------------------------------------- granularity


@pytest.mark.parametrize(
    ("spelling", "expected"),
    [
        ("none", Granularity("none")),
        ("All", Granularity("all")),
        ("second", Granularity("period", millis=1_000)),
        ("MINUTE", Granularity("period", millis=60_000)),
        ("five_minute", Granularity("period", millis=300_000)),
        ("TEN_MINUTE", Granularity("period", millis=600_000)),
        ("FIFTEEN_MINUTE", Granularity("period", millis=900_000)),
        ("THIRTY_MINUTE", Granularity("period", millis=1_800_000)),
        ("hour", Granularity("period", millis=3_600_000)),
        ("SIX_HOUR", Granularity("period", millis=21_600_000)),
        ("EIGHT_HOUR", Granularity("period", millis=28_800_000)),
        ("day", Granularity("period", days=1)),
        ("WEEK", Granularity("period", days=7)),
        ("month", Granularity("period", months=1)),
        ("QUARTER", Granularity("period", months=3)),
        ("year", Granularity("period", months=12)),
        ({"type": "period", "period": "PT15M"}, Granularity("period", millis=900_000)),
        ({"type": "period", "period": "P1W"}, Granularity("period", days=7)),
        ({"type": "period", "period": "P3M", "timeZone": "Etc/UTC"}, Granularity("period", months=3)),
        (
            {"type": "period", "period": "P1Y", "timeZone": "Z", "origin": "1970-01-01T00:00:00.000Z"},
            Granularity("period", months=12),
        ),
        ({"type": "period", "period": "PT1H30M"}, Granularity("period", millis=5_400_000)),
        ({"type": "duration", "duration": 7_200_000}, Granularity("period", millis=7_200_000)),
        ({"type": "none"}, Granularity("none")),
        ({"type": "all"}, Granularity("all")),
        ("PT2H", Granularity("period", millis=7_200_000)),
    ],
)
def test_granularity_spellings(spelling: object, expected: Granularity) -> None:
    assert Granularity.parse(spelling) == expected


@pytest.mark.parametrize(
    ("granularity", "name", "json_form"),
    [
        (Granularity("none"), "NONE", "NONE"),
        (Granularity("all"), "ALL", "ALL"),
        (Granularity("period", millis=3_600_000), "HOUR", "HOUR"),
        (Granularity("period", millis=900_000), "FIFTEEN_MINUTE", "FIFTEEN_MINUTE"),
        (Granularity("period", days=7), "WEEK", "WEEK"),
        (Granularity("period", months=3), "QUARTER", "QUARTER"),
        (Granularity("period", millis=7_200_000), "PT2H", {"type": "period", "period": "PT2H"}),
        (Granularity("period", days=2), "P2D", {"type": "period", "period": "P2D"}),
        (Granularity("period", months=24), "P2Y", {"type": "period", "period": "P2Y"}),
        (Granularity("period", millis=500), "PT0.5S", {"type": "period", "period": "PT0.5S"}),
    ],
)
def test_granularity_names_and_json(granularity: Granularity, name: str, json_form: object) -> None:
    assert granularity.name == name
    assert granularity.to_json() == json_form
    assert Granularity.parse(json_form) == granularity


def test_granularity_iso_period() -> None:
    assert Granularity.parse("FIFTEEN_MINUTE").iso_period == "PT15M"
    assert Granularity.parse("WEEK").iso_period == "P1W"
    assert Granularity.parse("YEAR").iso_period == "P1Y"
    assert Granularity.parse("NONE").iso_period == ""


@pytest.mark.parametrize(
    ("spelling", "path", "fragment"),
    [
        ("P1DT1H", "", "combined period"),
        ("P1M1D", "", "combined period"),
        ("PT0S", "", "must be positive"),
        ("-PT1H", "", "negative"),
        ("fortnight", "", "unknown granularity"),
        ({"type": "period", "period": "PT1H", "timeZone": "America/New_York"}, "timeZone", "only UTC"),
        ({"type": "period", "period": "PT1H", "origin": "1970-01-01T01:00:00Z"}, "origin", "epoch"),
        ({"type": "period", "period": "PT1H", "origin": "noon"}, "origin", "ISO-8601"),
        ({"type": "period"}, "period", "period string"),
        ({"type": "period", "period": "PT1H", "offset": 1}, "offset", "unexpected field"),
        ({"type": "duration", "duration": -5}, "duration", "must be > 0"),
        ({"type": "duration", "duration": "PT1H"}, "duration", "milliseconds"),
        ({"type": "arbitrary"}, "type", "unknown granularity type"),
        ({"period": "PT1H"}, "type", "needs a string 'type'"),
        (None, "", "got null"),
    ],
)
def test_bad_granularities(spelling: object, path: str, fragment: str) -> None:
    with pytest.raises(SpecError) as caught:
        Granularity.parse(spelling)
    assert len(caught.value.errors) == 1
    assert caught.value.errors[0][0] == path
    assert fragment in caught.value.errors[0][1]


def test_granularity_values_are_validated_on_construction() -> None:
    with pytest.raises(SpecError):
        Granularity("period", days=1, millis=1)
    with pytest.raises(SpecError):
        Granularity("period")
    with pytest.raises(SpecError):
        Granularity("none", days=1)


# Expected bucket bounds below were worked out by hand with a calendar.
# 2024-02-29 is a Thursday (leap day); 2023-12-31 a Sunday; 2021-01-03 a Sunday in ISO week
# 2020-W53 (which starts Monday 2020-12-28); 1969-12-31 a Wednesday.
A = utc(2024, 2, 29, 13, 47, 31, 123456)
B = utc(2023, 12, 31, 23, 59, 59, 999000)
C = utc(2021, 1, 3, 5, 0, 0)
D = utc(1969, 12, 31, 23, 30, 0)
E = utc(2024, 4, 1, 0, 0, 0)

BUCKETS: list[tuple[str, datetime, datetime, datetime]] = [
    ("NONE", A, utc(2024, 2, 29, 13, 47, 31, 123000), utc(2024, 2, 29, 13, 47, 31, 124000)),
    ("NONE", E, E, utc(2024, 4, 1, 0, 0, 0, 1000)),
    ("ALL", A, utc(1000, 1, 1), utc(3000, 1, 1)),
    ("ALL", D, utc(1000, 1, 1), utc(3000, 1, 1)),
    ("SECOND", A, utc(2024, 2, 29, 13, 47, 31), utc(2024, 2, 29, 13, 47, 32)),
    ("SECOND", B, utc(2023, 12, 31, 23, 59, 59), utc(2024, 1, 1)),
    ("MINUTE", A, utc(2024, 2, 29, 13, 47), utc(2024, 2, 29, 13, 48)),
    ("MINUTE", B, utc(2023, 12, 31, 23, 59), utc(2024, 1, 1)),
    ("FIVE_MINUTE", A, utc(2024, 2, 29, 13, 45), utc(2024, 2, 29, 13, 50)),
    ("TEN_MINUTE", A, utc(2024, 2, 29, 13, 40), utc(2024, 2, 29, 13, 50)),
    ("FIFTEEN_MINUTE", A, utc(2024, 2, 29, 13, 45), utc(2024, 2, 29, 14, 0)),
    ("FIFTEEN_MINUTE", B, utc(2023, 12, 31, 23, 45), utc(2024, 1, 1)),
    ("THIRTY_MINUTE", A, utc(2024, 2, 29, 13, 30), utc(2024, 2, 29, 14, 0)),
    ("THIRTY_MINUTE", D, utc(1969, 12, 31, 23, 30), utc(1970, 1, 1)),
    ("HOUR", A, utc(2024, 2, 29, 13), utc(2024, 2, 29, 14)),
    ("HOUR", D, utc(1969, 12, 31, 23), utc(1970, 1, 1)),
    ("HOUR", E, E, utc(2024, 4, 1, 1)),
    ("SIX_HOUR", A, utc(2024, 2, 29, 12), utc(2024, 2, 29, 18)),
    ("SIX_HOUR", B, utc(2023, 12, 31, 18), utc(2024, 1, 1)),
    ("SIX_HOUR", D, utc(1969, 12, 31, 18), utc(1970, 1, 1)),
    ("EIGHT_HOUR", A, utc(2024, 2, 29, 8), utc(2024, 2, 29, 16)),
    ("EIGHT_HOUR", B, utc(2023, 12, 31, 16), utc(2024, 1, 1)),
    ("DAY", A, utc(2024, 2, 29), utc(2024, 3, 1)),
    ("DAY", B, utc(2023, 12, 31), utc(2024, 1, 1)),
    ("DAY", D, utc(1969, 12, 31), utc(1970, 1, 1)),
    ("WEEK", A, utc(2024, 2, 26), utc(2024, 3, 4)),
    ("WEEK", B, utc(2023, 12, 25), utc(2024, 1, 1)),
    ("WEEK", C, utc(2020, 12, 28), utc(2021, 1, 4)),
    ("WEEK", D, utc(1969, 12, 29), utc(1970, 1, 5)),
    ("WEEK", utc(2024, 1, 1), utc(2024, 1, 1), utc(2024, 1, 8)),
    ("MONTH", A, utc(2024, 2, 1), utc(2024, 3, 1)),
    ("MONTH", B, utc(2023, 12, 1), utc(2024, 1, 1)),
    ("MONTH", D, utc(1969, 12, 1), utc(1970, 1, 1)),
    ("QUARTER", A, utc(2024, 1, 1), utc(2024, 4, 1)),
    ("QUARTER", B, utc(2023, 10, 1), utc(2024, 1, 1)),
    ("QUARTER", E, utc(2024, 4, 1), utc(2024, 7, 1)),
    ("QUARTER", utc(2024, 8, 15), utc(2024, 7, 1), utc(2024, 10, 1)),
    ("QUARTER", D, utc(1969, 10, 1), utc(1970, 1, 1)),
    ("YEAR", A, utc(2024, 1, 1), utc(2025, 1, 1)),
    ("YEAR", B, utc(2023, 1, 1), utc(2024, 1, 1)),
    ("YEAR", D, utc(1969, 1, 1), utc(1970, 1, 1)),
]


@pytest.mark.parametrize(
    ("name", "moment", "start", "end"),
    [pytest.param(*row, id=f"{row[0]}-{row[1].isoformat()}") for row in BUCKETS],
)
def test_truncate_and_bucket_end(name: str, moment: datetime, start: datetime, end: datetime) -> None:
    granularity = Granularity.parse(name)
    assert granularity.truncate(moment) == start
    assert granularity.truncate(moment).tzinfo == UTC
    assert granularity.bucket_end(start) == end
    assert granularity.bucket_end(moment) == end
    assert granularity.truncate(start) == start


@pytest.mark.parametrize(
    ("spelling", "moment", "start", "end"),
    [
        ({"type": "period", "period": "PT2H"}, A, utc(2024, 2, 29, 12), utc(2024, 2, 29, 14)),
        (
            {"type": "duration", "duration": 90_000},
            utc(1970, 1, 1, 0, 4),
            utc(1970, 1, 1, 0, 3),
            utc(1970, 1, 1, 0, 4, 30),
        ),
        # 2024-02-26 is 19775 days (1412 fortnights + 7 days) after Monday 1970-01-05,
        # so the P2W bucket holding 2024-02-29 starts 2024-02-19.
        ({"type": "period", "period": "P2W"}, utc(2024, 2, 29), utc(2024, 2, 19), utc(2024, 3, 4)),
        ({"type": "period", "period": "P2D"}, utc(1970, 1, 4, 12), utc(1970, 1, 3), utc(1970, 1, 5)),
        ({"type": "period", "period": "P6M"}, utc(2024, 8, 15), utc(2024, 7, 1), utc(2025, 1, 1)),
        ({"type": "period", "period": "P1M"}, utc(2024, 12, 31, 23), utc(2024, 12, 1), utc(2025, 1, 1)),
    ],
)
def test_period_buckets(spelling: object, moment: datetime, start: datetime, end: datetime) -> None:
    granularity = Granularity.parse(spelling)
    assert granularity.truncate(moment) == start
    assert granularity.bucket_end(start) == end


def test_truncate_converts_other_zones_and_rejects_naive() -> None:
    plus_two = timezone(timedelta(hours=2))
    assert Granularity.parse("DAY").truncate(datetime(2024, 1, 1, 1, 30, tzinfo=plus_two)) == utc(
        2023, 12, 31
    )
    with pytest.raises(ValueError):
        Granularity.parse("DAY").truncate(datetime(2024, 1, 1))  # noqa: DTZ001
