"""How many supervisors one leader holds: a model fed by a measured ``cost --steps`` run.

Every supervisor's task group launches a task per interval ``T`` (a quiet topic never fills a task
sooner), so ``N`` supervisors make ``N / T`` tasks a second. Each costs the leader's main process
``c`` ms of CPU (one Python interpreter: it cannot use more than one core, and past ~3/4 of one
its queues, and so freshness, grow), the Spark workers ``w`` ms and PostgreSQL ``p`` ms, all read
from the run. A record waits at most ``T`` for its task and then the task's own time, so freshness
p95 is about ``T`` plus the task's p95. The broker's share is left out: it grows with the records
and the partitions, not with the tasks (the run's broker also served its load generator).

    python -m benchmarks.control_plane_model [results file] [--supervisors 100 --rate 10]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from benchmarks.results_file import RESULTS

MAIN_PROCESS_BUDGET = 0.75
"""The share of one core the leader's main process may spend before its queues grow."""
SUPERVISORS = (100, 300, 1000)
INTERVALS_S = (1.5, 2.5, 5.0, 10.0)


def per_task(run: dict[str, Any]) -> dict[str, float]:
    """A run's CPU per task in ms: the leader's main process, the Spark workers, PostgreSQL; and a task's p95."""
    tasks_per_s = run["control_plane"]["tasks_per_s"]
    cores = run["cores_by_kind"]
    return {"main_ms": run["control_plane"]["main_process_ms_per_task"],
            "workers_ms": 1000 * cores["python_workers"] / tasks_per_s,
            "postgres_ms": 1000 * cores["postgres"] / tasks_per_s,
            "task_p95_s": run["task_p95"]["index_s"] + run["task_p95"]["publish_s"]}


def capacity(costs: dict[str, float]) -> list[dict[str, Any]]:
    """For each number of supervisors and interval: tasks/s, the cores each part needs, whether one leader holds it."""
    rows = []
    for supervisors in SUPERVISORS:
        for interval in INTERVALS_S:
            tasks_per_s = supervisors / interval
            main = tasks_per_s * costs["main_ms"] / 1000
            rows.append({"supervisors": supervisors, "interval_s": interval, "tasks_per_s": round(tasks_per_s, 1),
                         "main_process_cores": round(main, 2),
                         "worker_cores": round(tasks_per_s * costs["workers_ms"] / 1000, 2),
                         "postgres_cores": round(tasks_per_s * costs["postgres_ms"] / 1000, 2),
                         "freshness_p95_s": round(interval + costs["task_p95_s"], 1),
                         "leaders_needed": max(1, -int(-main // MAIN_PROCESS_BUDGET))})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", default=str(RESULTS / "cost_steps.json"))
    parser.add_argument("--supervisors", type=int, default=100, help="the measured run to read")
    parser.add_argument("--rate", type=int, default=10)
    args = parser.parse_args()
    runs = json.loads(Path(args.results).read_text())["runs"]
    run = next(r for r in runs if (r["supervisors"], r["rate_per_s_each"]) == (args.supervisors, args.rate))
    costs = per_task(run)
    print(json.dumps({"from": f"{args.supervisors} x {args.rate} events/s",
                      **{k: round(v, 2) for k, v in costs.items()}}))
    print("| supervisors | interval s | tasks/s | main process cores | leaders | worker cores | PostgreSQL cores | "
          "freshness p95 s |")
    print("|---|---|---|---|---|---|---|---|")
    for row in capacity(costs):
        print(f"| {row['supervisors']} | {row['interval_s']} | {row['tasks_per_s']} | {row['main_process_cores']} | "
              f"{row['leaders_needed']} | {row['worker_cores']} | {row['postgres_cores']} | {row['freshness_p95_s']} |")


if __name__ == "__main__":
    main()
