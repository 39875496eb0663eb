"""Engine kills per principal: the window, the penalty, and no one else refused."""

from __future__ import annotations

import pytest

from overlord.query.kill_throttle import KillThrottle
from overlord.query.query_errors import QueryError

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_kills_within_the_window_refuse_that_principal_for_the_penalty_and_no_one_else():
    clock = Clock()
    throttle = KillThrottle(kills=3, window_s=60, penalty_s=120, clock=clock)
    throttle.record("mallory")
    clock.now += 61  # the first kill leaves the window
    throttle.record("mallory")
    throttle.record("mallory")
    throttle.check("mallory")  # two kills in the window: not yet
    throttle.record("mallory")
    with pytest.raises(QueryError) as refused:
        throttle.check("mallory")
    assert refused.value.status == 429 and refused.value.retry_after == 120
    throttle.check("alice")  # others run
    clock.now += 119.5
    with pytest.raises(QueryError) as still:
        throttle.check("mallory")
    assert still.value.retry_after == 1
    clock.now += 1
    throttle.check("mallory")  # served its time
