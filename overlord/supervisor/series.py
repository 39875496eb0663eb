"""A supervisor's history as fixed-step time series: what the console charts and ``/series`` serves.

Each step (10 s) keeps the min, max and last lag and records/s of the polls that landed in it,
and counts the tasks that published or failed in it with their longest duration, so a spike
shorter than the chart's resolution still shows as its step's max. Steps older than the span
(an hour) are dropped; a step no poll landed in is absent, never interpolated.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

__all__ = ["SPAN_S", "STEP_S", "Series"]

STEP_S = 10
SPAN_S = 3600


@dataclass
class _Step:
    t: int
    lag_min: int | None = None
    lag_max: int | None = None
    lag: int | None = None
    rate_max: float | None = None
    rate: float | None = None
    published: int = 0
    failed: int = 0
    task_seconds_max: float | None = None

    def as_json(self) -> dict[str, Any]:
        return {"t": self.t, "lagMin": self.lag_min, "lagMax": self.lag_max, "lag": self.lag,
                "rateMax": self.rate_max, "rate": self.rate, "published": self.published, "failed": self.failed,
                "taskSecondsMax": self.task_seconds_max}


class Series:
    """Fixed-step series of one supervisor; thread-safe."""

    def __init__(self, step_s: int = STEP_S, span_s: int = SPAN_S) -> None:
        self.step_s, self.span_s = step_s, span_s
        self._steps: deque[_Step] = deque()
        self._guard = threading.Lock()

    def _step(self, t: float) -> _Step:
        start = int(t // self.step_s * self.step_s)
        if not self._steps or self._steps[-1].t < start:
            self._steps.append(_Step(start))
        while self._steps[0].t <= start - self.span_s:
            self._steps.popleft()
        return next((s for s in reversed(self._steps) if s.t <= start), self._steps[0])  # a late report: oldest

    def observe(self, t: float, lag: int, rate: float) -> None:
        """A poll at unix time ``t``: the aggregate lag and the records/s then."""
        with self._guard:
            step = self._step(t)
            step.lag_min = lag if step.lag_min is None else min(step.lag_min, lag)
            step.lag_max = lag if step.lag_max is None else max(step.lag_max, lag)
            step.rate_max = rate if step.rate_max is None else max(step.rate_max, rate)
            step.lag, step.rate = lag, rate

    def task(self, t: float, ok: bool, seconds: float) -> None:
        """A task that ended at ``t``: published (``ok``) or not, after ``seconds``."""
        with self._guard:
            step = self._step(t)
            step.published += ok
            step.failed += not ok
            step.task_seconds_max = seconds if step.task_seconds_max is None else max(step.task_seconds_max, seconds)

    def as_json(self, now: float) -> dict[str, Any]:
        """``{"stepSeconds", "points"}``: what ``.../series`` and the console's charts get."""
        return {"stepSeconds": self.step_s, "points": self.points(now)}

    def points(self, now: float) -> list[dict[str, Any]]:
        """The steps within the span before ``now``, oldest first."""
        with self._guard:
            return [s.as_json() for s in self._steps if s.t > now - self.span_s]
