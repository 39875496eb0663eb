"""The capacity model of one leader (issue 51) computes what its docstring says from a run's figures."""

from __future__ import annotations

import pytest

from benchmarks.control_plane_model import capacity, per_task

pytestmark = pytest.mark.unit

RUN = {"control_plane": {"tasks_per_s": 40.0, "main_process_ms_per_task": 6.0},
       "cores_by_kind": {"python_workers": 0.8, "postgres": 0.04},
       "task_p95": {"index_s": 0.4, "publish_s": 0.1}}


def test_per_task_costs_come_from_the_run() -> None:
    assert per_task(RUN) == pytest.approx({"main_ms": 6.0, "workers_ms": 20.0, "postgres_ms": 1.0, "task_p95_s": 0.5})


def test_a_thousand_quiet_supervisors_need_several_leaders_at_a_few_seconds_of_freshness() -> None:
    rows = {(r["supervisors"], r["interval_s"]): r for r in capacity(per_task(RUN))}
    assert rows[(100, 1.5)] == {"supervisors": 100, "interval_s": 1.5, "tasks_per_s": 66.7, "main_process_cores": 0.4,
                                "worker_cores": 1.33, "postgres_cores": 0.07, "freshness_p95_s": 2.0,
                                "leaders_needed": 1}
    assert rows[(1000, 2.5)]["main_process_cores"] == 2.4 and rows[(1000, 2.5)]["leaders_needed"] == 4
    assert rows[(1000, 10.0)]["leaders_needed"] == 1  # 0.6 core: one leader, at ten seconds
