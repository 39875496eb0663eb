"""The overlord's main-process CPU over a measured window, per task and by step (issue 51).

:meth:`StepWindow.start` and :meth:`StepWindow.stop` bracket the window in the overlord's own
process; :meth:`StepWindow.report` divides what the window cost by the tasks booked in it (the
count of ``finish.bookkeeping``): the steps of :mod:`indexing_task.step_costs`, the process's CPU
(``time.process_time``: every thread, ended ones included), the CPU of its live threads by name,
what no step covers, and the profile of :class:`benchmarks.cpu_sampler.CpuSampler` when asked.
"""

from __future__ import annotations

import time
from typing import Any

from benchmarks.cpu_sampler import CpuSampler
from indexing_task.step_costs import STEP_COSTS, StepCost, since, thread_cpu

__all__ = ["StepWindow"]

_BOOKED = "finish.bookkeeping"
"""The step run once per finished task: the window's task count."""


class StepWindow:
    """One measured window of the main process's CPU."""

    def __init__(self, profile: bool = True) -> None:
        self.sampler = CpuSampler() if profile else None
        self._steps: dict[str, StepCost] = {}
        self._threads: dict[str, float] = {}
        self._cpu = self._wall = 0.0

    def start(self) -> None:
        self._steps, self._threads = STEP_COSTS.snapshot(), thread_cpu()
        self._cpu, self._wall = time.process_time(), time.monotonic()
        if self.sampler is not None:
            self.sampler.start()

    def stop(self) -> None:
        after = thread_cpu()  # while the sampler's thread still runs: one that just ended may linger unnamed
        if self.sampler is not None:
            self.sampler.stop()
        self._cpu, self._wall = time.process_time() - self._cpu, time.monotonic() - self._wall
        self._steps = since(self._steps, STEP_COSTS.snapshot())
        self._threads = {name: after[name] - self._threads.get(name, 0.0) for name in after}

    def report(self) -> dict[str, Any]:
        """Per task (ms of main-process CPU) and in all, for the window."""
        tasks = max(1, self._steps.get(_BOOKED, StepCost(0, 0.0)).count)
        sampler_s = self.sampler.sampler_cpu_s if self.sampler is not None else 0.0
        steps_s = sum(cost.cpu_s for cost in self._steps.values())
        main_s = self._cpu - sampler_s
        per_task = {name: {"ms_per_task": round(1000 * cost.cpu_s / tasks, 3),
                           "runs_per_task": round(cost.count / tasks, 2),
                           "us_per_run": round(1e6 * cost.cpu_s / cost.count, 1) if cost.count else None}
                    for name, cost in sorted(self._steps.items(), key=lambda item: -item[1].cpu_s) if cost.count}
        return {
            "window_s": round(self._wall, 1), "tasks": tasks, "tasks_per_s": round(tasks / self._wall, 2),
            "main_process_cores": round(main_s / self._wall, 3),
            "main_process_ms_per_task": round(1000 * main_s / tasks, 2),
            "steps_ms_per_task": round(1000 * steps_s / tasks, 2),
            "not_in_a_step_ms_per_task": round(1000 * (main_s - steps_s) / tasks, 2),
            "steps": per_task,
            "threads_ms_per_task": {name: round(1000 * s / tasks, 2)
                                    for name, s in sorted(self._threads.items(), key=lambda item: -item[1])
                                    if s > 0 and name != "cpu-sampler"},
            "profile": self.sampler.top() if self.sampler is not None else None,
        }
