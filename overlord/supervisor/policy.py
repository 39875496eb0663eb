"""How supervisors behave, as data: health thresholds, retry backoff, idle polling."""

from __future__ import annotations

from dataclasses import dataclass

from overlord.config import Settings

__all__ = ["SupervisorPolicy"]


@dataclass(frozen=True)
class SupervisorPolicy:
    """The knobs of every supervisor's run loop (one policy per overlord)."""

    unhealthy_after: int = 3
    """Consecutive failed runs (or failed tasks of a group) before the state turns unhealthy."""
    backoff_base_s: float = 2.0
    """A group's first retry waits this long; every further failure doubles it ..."""
    backoff_cap_s: float = 300.0
    """... up to this cap."""
    idle_poll_s: float = 1.0
    """How often a supervisor with no task in flight looks at its topic again (besides ``period``)."""
    max_records_per_task: int = Settings.model_fields["task_max_records"].default
    """The most offsets one task reads (over all its partitions): a backlog is worked off by a
    sequence of tasks, each well inside ``completionTimeout``, instead of ever larger retries."""
    watermarks_max_age_s: float = 10.0
    """How old a supervisor's watermarks may grow while no task group can launch or its tasks read to the end
    (the status's lag between tasks, new partitions, committed offsets another writer moved)."""
    earliest_max_age_s: float = 30.0
    """How old the earliest offsets may grow (they move only when retention deletes records); a look at the
    topic asks for them sooner after a failed task, for new partitions and while a partition is stopped."""
    min_task_interval_s: float = 0.0
    """The least time between two launches in one task group unless the next task is full: a
    trickle is indexed in fewer, larger tasks (the overlord sets ``OVERLORD_TASK_MIN_INTERVAL_S``)."""
    target_records: int = 0
    """Records enough for a task's fixed cost: a group whose topic brings this many sooner than
    ``min_task_interval_s`` launches once they are there (0: never sooner; the overlord sets
    ``OVERLORD_TASK_TARGET_RECORDS``). A busy topic's records then wait a fraction of the interval."""

    def backoff_s(self, failures: int) -> float:
        """The wait before retrying a group that has failed ``failures`` times in a row (>= 1)."""
        return float(min(self.backoff_cap_s, self.backoff_base_s * 2 ** (failures - 1)))
