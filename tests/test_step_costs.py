"""The control plane's CPU accounting by step (issue 51): what it counts, on its own and for a real task."""

from __future__ import annotations

import threading
import time

from indexing_task.step_costs import STEP_COSTS, StepCosts, since, thread_cpu
from overlord.dev.sample_data import make_sample_events, produce
from tests.helpers import committed_total, spec_json, wait_until


def _burn(seconds: float) -> None:
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


def test_a_step_counts_its_own_cpu_time_without_the_steps_inside_it() -> None:
    costs = StepCosts()
    with costs.step("outer"):
        _burn(0.02)
        with costs.step("inner"):
            _burn(0.03)
        time.sleep(0.05)  # waiting is not CPU time
    steps = costs.snapshot()
    assert steps["outer"].count == steps["inner"].count == 1
    assert 0.02 <= steps["outer"].cpu_s < 0.03
    assert 0.03 <= steps["inner"].cpu_s < 0.04


def test_threads_nest_their_steps_apart_and_add_to_one_total() -> None:
    costs = StepCosts()

    def work() -> None:
        with costs.step("outer"):
            with costs.step("inner"):
                _burn(0.01)

    threads = [threading.Thread(target=work, name=f"burner_{i}") for i in range(4)]
    for thread in threads:
        thread.start()
    cpu = thread_cpu()
    for thread in threads:
        thread.join()
    steps = costs.snapshot()
    assert steps["inner"].count == steps["outer"].count == 4
    assert steps["inner"].cpu_s >= 0.04
    assert steps["outer"].cpu_s < 0.01
    assert "MainThread" in cpu


def test_a_step_costs_a_few_microseconds() -> None:
    costs, runs = StepCosts(), 20_000
    started = time.thread_time()
    for _ in range(runs):
        with costs.step("nothing"):
            pass
    assert (time.thread_time() - started) / runs < 20e-6  # ~3 µs here; generous for a loaded machine


def test_a_real_task_is_counted_step_by_step(stack, make_topic, datasource, make_overlord):
    topic = make_topic(1)
    overlord = make_overlord()
    before = overlord.step_costs()
    overlord.submit(spec_json(datasource, topic))
    events = make_sample_events(200, seed=1)
    produce(stack.bootstrap_servers, topic, events.records, 1)
    wait_until(lambda: committed_total(overlord.engine, datasource) == len(events.records), "all records committed")
    sup = overlord.get(datasource)
    wait_until(lambda: not sup.status.active_tasks and sup.status.recent_tasks, "the task booked")
    steps = since(before, overlord.step_costs())
    finished = len(sup.status.recent_tasks)
    for name in ("launch.task_row", "launch.submit", "task.run", "task.start", "task.plan",
                 "task.resident_round_trip", "task.results", "task.check_topic", "task.publish", "task.done",
                 "finish.bookkeeping", "finish.task_row", "finish.metrics"):
        assert steps[name].count >= finished, name
    for name in ("schedule.run", "schedule.wake", "supervisor.run", "supervisor.task_status",
                 "supervisor.read_offsets", "supervisor.topic_check", "supervisor.watermarks", "supervisor.plan",
                 "supervisor.status"):
        assert steps[name].count >= 1, name
    assert steps["task.publish"].cpu_s > 0
    assert all(cost.cpu_s >= 0 for cost in steps.values())
    assert STEP_COSTS.snapshot()["task.publish"].count >= finished
    exposition = overlord.metrics.exposition().decode()
    assert 'overlord_control_plane_cpu_seconds_total{step="task.publish"}' in exposition
    assert 'overlord_control_plane_steps_total{step="launch.submit"}' in exposition
