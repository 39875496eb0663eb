"""CPU time of the overlord's control plane, by named step: where a task's milliseconds go.

Each step is a ``with STEP_COSTS.step("name"):`` block; it adds the CPU time its thread spent
in it (``time.thread_time``, so waits for a lock, a socket or PostgreSQL cost nothing) and one
to its count. Steps nest: a step's time is its own, without the steps run inside it, so the
steps of a process add up to the CPU time they cover. A step costs about 3 µs (two clock reads,
a lock and a dictionary update); it is always on.

One accounting per process (:data:`STEP_COSTS`): the supervisors' threads, the task threads and
the scheduler all add to it. :func:`thread_cpu` gives every thread's CPU time by name, for what
no step covers (the scheduler's own thread, py4j, the resident runners' threads).

Lives below ``overlord`` so that an indexing task's driver side (:mod:`indexing_task.task`) can
count its steps too.
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass

__all__ = ["STEP_COSTS", "StepCost", "StepCosts", "since", "thread_cpu"]


@dataclass(frozen=True)
class StepCost:
    """How often a step ran and the CPU seconds it spent (its own, without the steps run inside it)."""

    count: int
    cpu_s: float


class _Step:
    """One run of a step: a context manager (see :meth:`StepCosts.step`)."""

    __slots__ = ("_costs", "_name", "_started", "inner_s")

    def __init__(self, costs: StepCosts, name: str) -> None:
        self._costs, self._name, self._started = costs, name, 0.0
        self.inner_s = 0.0
        """CPU seconds of the steps run inside this one (taken off its own)."""

    def __enter__(self) -> None:
        local = self._costs._local
        try:
            local.stack.append(self)
        except AttributeError:
            local.stack = [self]
        self._started = time.thread_time()

    def __exit__(self, *_exc: object) -> None:
        spent = time.thread_time() - self._started
        stack = self._costs._local.stack
        stack.pop()
        if stack:
            stack[-1].inner_s += spent
        self._costs._add(self._name, spent - self.inner_s)


class StepCosts:
    """CPU seconds and counts per step name, thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals: dict[str, list[float]] = {}
        self._local = threading.local()

    def step(self, name: str) -> _Step:
        """A context manager: the block is one run of step ``name``, its own CPU time added to the step's."""
        return _Step(self, name)

    def _add(self, name: str, cpu_s: float) -> None:
        with self._lock:
            total = self._totals.get(name)
            if total is None:
                self._totals[name] = [1, cpu_s]
            else:
                total[0] += 1
                total[1] += cpu_s

    def snapshot(self) -> dict[str, StepCost]:
        """Every step's count and CPU seconds so far."""
        with self._lock:
            return {name: StepCost(int(count), cpu_s) for name, (count, cpu_s) in self._totals.items()}

    def reset(self) -> None:
        with self._lock:
            self._totals.clear()


STEP_COSTS = StepCosts()
"""The process's accounting."""


def since(before: dict[str, StepCost], after: dict[str, StepCost]) -> dict[str, StepCost]:
    """The steps' counts and CPU seconds between two snapshots."""
    none = StepCost(0, 0.0)
    return {name: StepCost(cost.count - before.get(name, none).count, cost.cpu_s - before.get(name, none).cpu_s)
            for name, cost in after.items()}


_TICKS_PER_S = 100.0
"""Linux's USER_HZ: /proc counts CPU time in these."""


def thread_cpu() -> dict[str, float]:
    """CPU seconds of this process's live threads so far, by Python thread name, digits dropped.

    ``task_3`` counts as ``task_``; threads Python did not start are ``native``; a thread that ended is
    no longer counted. Linux only (reads /proc/self/task).
    """
    names = {thread.native_id: re.sub(r"\d+", "", thread.name) for thread in threading.enumerate()}
    out: dict[str, float] = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        name = names.get(int(tid), "native")
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / _TICKS_PER_S
    return out
