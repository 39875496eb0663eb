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
