"""A supervisor's history keeps what happened: fixed steps with the min and max of each, so a spike
between two polls is still in the chart an hour later, and counts add up per step.
"""

from __future__ import annotations

import pytest

from overlord.supervisor.series import Series

pytestmark = pytest.mark.unit


def test_a_spike_between_two_points_survives_in_its_steps_max_for_the_whole_span():
    series = Series(step_s=10, span_s=3600)
    series.observe(1000.0, lag=5, rate=100.0)
    series.observe(1003.0, lag=2715, rate=90.0)  # the spike: later in the same step
    series.observe(1007.0, lag=40, rate=95.0)
    for t in range(1010, 1000 + 3590, 2):  # an hour of quiet polls every 2 s
        series.observe(float(t), lag=3, rate=100.0)
    [first, *rest] = series.points(now=4590.0)
    assert (first["t"], first["lagMin"], first["lagMax"], first["lag"], first["rateMax"]) == (1000, 5, 2715, 40, 100.0)
    assert max(p["lagMax"] for p in rest) == 3 and len(rest) == 358
    assert series.points(now=4610.0)[0]["t"] == 1020  # older than the span: gone


def test_task_outcomes_and_durations_count_per_step():
    series = Series(step_s=10, span_s=600)
    series.task(1001.0, ok=True, seconds=1.5)
    series.task(1002.0, ok=False, seconds=30.0)
    series.task(1015.0, ok=True, seconds=2.0)
    points = {p["t"]: p for p in series.points(now=1020.0)}
    assert (points[1000]["published"], points[1000]["failed"], points[1000]["taskSecondsMax"]) == (1, 1, 30.0)
    assert (points[1010]["published"], points[1010]["failed"], points[1010]["taskSecondsMax"]) == (1, 0, 2.0)
    assert points[1000]["lag"] is None  # no poll landed in that step: nothing is made up
