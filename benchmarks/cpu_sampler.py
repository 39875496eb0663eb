"""A sampling profiler of this process's Python threads, weighted by CPU time: where the main process spends.

Every ``interval_s`` a thread of its own reads every thread's stack (``sys._current_frames``) and
its CPU clock (``pthread_getcpuclockid``); the CPU a thread used since the last sample is added
to each function on its stack (total) and to the innermost one (self). A stand-in for py-spy
when it is not installed; two approximations: a thread that ran and then blocked has its CPU put
on the blocking call's frame (self time leans towards ``recv``/``wait``), and CPU spent outside
Python frames (the interpreter between frames, C libraries) lands on the frame that called it.
Its own thread's CPU is reported apart (``sampler_cpu_s``).
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from types import FrameType
from typing import Any

__all__ = ["CpuSampler"]

_PREFIX = re.compile(r"^.*/(site-packages|python3\.\d+)/|^" + re.escape(str(Path(__file__).resolve().parents[1])) + "/")
"""What a file's path starts with that says nothing: the library's or the repository's directory."""


def _where(frame: FrameType) -> str:
    code = frame.f_code
    path = _PREFIX.sub("", code.co_filename)
    return f"{code.co_name} ({path}:{code.co_firstlineno})"


class CpuSampler:
    """Samples every ``interval_s`` from :meth:`start` to :meth:`stop`; :meth:`top` ranks functions."""

    def __init__(self, interval_s: float = 0.02) -> None:
        self.interval_s = interval_s
        self.self_s: defaultdict[str, float] = defaultdict(float)
        self.total_s: defaultdict[str, float] = defaultdict(float)
        self.by_thread_s: defaultdict[str, float] = defaultdict(float)
        self.samples = 0
        self.sampler_cpu_s = 0.0
        self._clocks: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        started = time.thread_time()
        while not self._stop.wait(self.interval_s):
            self._sample()
        self.sampler_cpu_s = time.thread_time() - started

    def _sample(self) -> None:
        me = threading.get_ident()
        names = {thread.ident: thread.name for thread in threading.enumerate()}
        self.samples += 1
        for ident, frame in sys._current_frames().items():
            if ident == me:
                continue
            try:
                now = time.clock_gettime(time.pthread_getcpuclockid(ident))
            except OSError:  # the thread ended meanwhile
                continue
            used = now - self._clocks.get(ident, now)
            self._clocks[ident] = now
            if used <= 0:
                continue
            self.by_thread_s[re.sub(r"\d+", "", names.get(ident, "?"))] += used
            self.self_s[_where(frame)] += used
            seen: set[str] = set()
            walk: FrameType | None = frame
            while walk is not None:
                where = _where(walk)
                if where not in seen:  # recursion counts once
                    seen.add(where)
                    self.total_s[where] += used
                walk = walk.f_back

    def top(self, n: int = 25) -> dict[str, Any]:
        """The ``n`` functions with the most self and total CPU seconds, and CPU seconds by thread."""
        return {"samples": self.samples, "interval_s": self.interval_s, "sampler_cpu_s": round(self.sampler_cpu_s, 3),
                "by_thread_s": _top(self.by_thread_s, n), "self_s": _top(self.self_s, n),
                "total_s": _top(self.total_s, n)}


def _top(seconds: dict[str, float], n: int) -> dict[str, float]:
    return {k: round(v, 3) for k, v in sorted(seconds.items(), key=lambda item: -item[1])[:n]}
