"""ISO-8601 durations: parsing and formatting.

Needs no infrastructure and no fixtures.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from specs import (
    SpecError,
    format_iso_duration,
    parse_iso_duration,
)
from specs.durations import parse_utc_interval

# --------------------------------------------------------------------------- durations


@pytest.mark.parametrize(
    ("text", "expected", "written"),
    [
        ("PT1H", timedelta(hours=1), "PT1H"),
        ("PT30S", timedelta(seconds=30), "PT30S"),
        ("PT5S", timedelta(seconds=5), "PT5S"),
        ("PT30M", timedelta(minutes=30), "PT30M"),
        ("pt10m", timedelta(minutes=10), "PT10M"),
        ("PT0.5S", timedelta(milliseconds=500), "PT0.5S"),
        ("PT90M", timedelta(minutes=90), "PT1H30M"),
        ("P1D", timedelta(days=1), "P1D"),
        ("P1W", timedelta(days=7), "P7D"),
        ("P1DT2H3M4.25S", timedelta(days=1, hours=2, minutes=3, seconds=4.25), "P1DT2H3M4.25S"),
        ("PT0S", timedelta(0), "PT0S"),
    ],
)
def test_durations_parse_and_format(text: str, expected: timedelta, written: str) -> None:
    assert parse_iso_duration(text) == expected
    assert format_iso_duration(expected) == written
    assert parse_iso_duration(written) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("P1M", "months and years"),
        ("P1Y", "months and years"),
        ("PT", "not an ISO-8601 period"),
        ("P", "not an ISO-8601 period"),
        ("1H", "not an ISO-8601 period"),
        ("PT1H2", "not an ISO-8601 period"),
        ("-PT1S", "negative"),
        ("PT1.0000001S", "microsecond"),
    ],
)
def test_bad_durations(text: str, fragment: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_iso_duration(text)
    assert fragment in str(caught.value)


@pytest.mark.parametrize(("text", "start", "end"), [
    ("2024-05-01/2024-05-02T12:00:00Z", "2024-05-01T00:00:00+00:00", "2024-05-02T12:00:00+00:00"),
    ("2014-02-02/p4w", "2014-02-02T00:00:00+00:00", "2014-03-02T00:00:00+00:00"),  # as pydruid's README writes it
    ("2024-01-31/P1M", "2024-01-31T00:00:00+00:00", "2024-02-29T00:00:00+00:00"),  # Joda clamps to the month's end
    ("PT6H/2024-05-01T03:00:00Z", "2024-04-30T21:00:00+00:00", "2024-05-01T03:00:00+00:00"),
    ("1000/3000", "1000-01-01T00:00:00+00:00", "3000-01-01T00:00:00+00:00"),  # Druid's "all time"
    ("2024-02/P1M", "2024-02-01T00:00:00+00:00", "2024-03-01T00:00:00+00:00"),
])
def test_intervals_take_a_period_for_either_end_as_druids_do(text, start, end):
    assert [t.isoformat() for t in parse_utc_interval(text)] == [start, end]


@pytest.mark.parametrize("text", ["/P1D", "2024-01-01/", "P1D/P1D", "2024-01-01/PX", "2024-01-02/2024-01-01"])
def test_malformed_intervals_are_refused(text):
    with pytest.raises(ValueError, match="START/END|START before END"):
        parse_utc_interval(text)
