"""Engine kills per principal: whoever keeps killing the query engine is refused for a while, nobody else.

A query that has not returned at its deadline is stopped by killing the query engine
(:mod:`overlord.query.process`); every query it ran fails and the engine restarts. Each such
kill counts against the principal whose query it was (the authenticated user or token;
``anonymous`` when authentication is off). :data:`KILLS` kills within :data:`WINDOW_S` and that
principal's queries get a 429 with ``Retry-After`` for :data:`PENALTY_S`; other principals'
queries run as before.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable

from overlord.query.query_errors import QueryError

__all__ = ["KILLS", "PENALTY_S", "WINDOW_S", "KillThrottle"]

logger = logging.getLogger(__name__)

KILLS = 3
"""How many engine kills within :data:`WINDOW_S` get a principal refused."""

WINDOW_S = 600.0
"""The window engine kills are counted over (seconds)."""

PENALTY_S = 600.0
"""How long a principal's queries are refused once it has killed the engine :data:`KILLS` times (seconds)."""


class KillThrottle:
    """Counts engine kills per principal and refuses the queries of those past the threshold. Thread-safe."""

    def __init__(self, kills: int = KILLS, window_s: float = WINDOW_S, penalty_s: float = PENALTY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._max, self._window_s, self._penalty_s, self._clock = kills, window_s, penalty_s, clock
        self._kills: dict[str, deque[float]] = {}
        self._refused_until: dict[str, float] = {}
        self._lock = threading.Lock()

    def check(self, principal: str) -> None:
        """Raise a 429 :class:`QueryError` (with its ``retry_after``) if ``principal``'s queries are refused."""
        with self._lock:
            left = self._refused_until.get(principal, 0.0) - self._clock()
            if left <= 0:
                self._refused_until.pop(principal, None)
                return
        seconds = math.ceil(left)
        raise QueryError(f"queries of {principal!r} killed the query engine {self._max} times within "
                         f"{self._window_s:.0f} s (each ran past its timeout and could not be cancelled, which "
                         f"stops every query the engine runs): its queries are refused for {seconds} s more",
                         "QUERY_ENGINE_KILLS", status=429, retry_after=seconds)

    def record(self, principal: str) -> None:
        """A query of ``principal`` got the engine killed."""
        now = self._clock()
        with self._lock:
            kills = self._kills.setdefault(principal, deque())
            kills.append(now)
            while kills[0] <= now - self._window_s:
                kills.popleft()
            if len(kills) < self._max:
                return
            del self._kills[principal]
            self._refused_until[principal] = now + self._penalty_s
        logger.warning("queries of %r killed the query engine %d times within %.0f s: refused for %.0f s",
                       principal, self._max, self._window_s, self._penalty_s)
