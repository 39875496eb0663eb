"""Every benchmark scenario still runs: its ``--smoke`` mode (seconds, same code path) on the real stack.

The scenarios are found in ``benchmarks/scenarios/``, so a new one fails here until it has a smoke
mode and a check below. Each run starts its own broker, PostgreSQL and Spark (as the scenario does)
in a child process and writes to a temporary path, never into ``benchmarks/results``.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from overlord.dev.stack import DevStack

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = sorted(p.stem for p in (REPO / "benchmarks" / "scenarios").glob("*.py") if p.stem != "__init__")
MODES = {"ab --worker": ("ab", "--worker"), "cost --steps": ("cost", "--steps")}
"""Modes of a scenario that take another code path, each run too (the name is the check's key in SANE)."""

Check = Callable[[dict[str, Any]], bool]
SANE: dict[str, Check] = {
    "ab": lambda r: r["shapes"]["1 low"]["median_ratio"] > 0,
    "ab --worker": lambda r: r["mode"] == "worker" and r["shapes"]["1 low"]["cpu_ratio"] > 0,
    "auth_flood": lambda r: r["flood"]["requests"] > 0 and r["latency_logged_in_during_flood"]["requests"] > 0,
    "broker_cost": lambda r: set(r["broker_cores"]) == {"producer_only", "tailing_consumer", "indexer_cycle"},
    "cluster": lambda r: [run["records"] for run in r["runs"]] == [r["events"]] * 2 and r["cluster_over_local"] > 0,
    "cost": lambda r: r["records_measured"] > 0 and r["cores_overlord_tree"] > 0 and r["freshness_p95_s"] > 0
    and r["exact"]["ok"] and r["lag_max_by_minute_records"],
    "cost --steps": lambda r: r["control_plane"]["main_process_ms_per_task"] > 0
    and "supervisor.run" in r["control_plane"]["steps"],
    "formats": lambda r: r["shapes"]["1 low"]["csv_over_json"] > 0 and r["shapes"]["1 low"]["avro_over_json"] > 0,
    "freshness": lambda r: r["records"] > 0 and r["tasks"] > 0 and 0 < r["freshness_p50_s"] <= r["freshness_max_s"],
    "hostile_load": lambda r: r["hostile_queries"]["answers_by_status"] != {} and r["health_after"][0] == 200,
    "live_freshness": lambda r: r["summary"]["exactness"]["checks"] > 0 and r["summary"]["exactness"]["failed"] == 0,
    "object_storage": lambda r: r["answers_identical"] and r["first_query_after_publish"]["gets"] <= 1
    and r["bound"]["within"] and r["dashboard"]["exact"] and r["dashboard"]["statuses"].keys() == {"200"},
    "publish_cost": lambda r: r["alone"]["cpu_ms_per_publish"] > 0 and r["rounds"]["requests_per_transaction"] == 3,
    "query": lambda r: r["results_identical"] and r["duckdb_results_identical"],
    "storage": lambda r: r["events_sent"] > 0 and r["exact_before_retention"] and r["retention"]["exact"],
    "worker_cost": lambda r: r["specs"].keys() == {"wikipedia", "events"}
    and all(s["cpu_ms_p50"] > 0 and s["rows_out"] > 0 for s in r["specs"].values()),
}


def _numbers(value: Any) -> list[float]:
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v)]
    return [float(value)] if isinstance(value, int | float) and not isinstance(value, bool) else []


@pytest.mark.own_stack
@pytest.mark.benchmark_smoke
@pytest.mark.timeout(240)
@pytest.mark.parametrize("scenario", [*SCENARIOS, *MODES])
def test_scenario_smoke_run(scenario: str, tmp_path: Path) -> None:
    module, *options = MODES.get(scenario, (scenario,))
    out = tmp_path / f"{module}.json"
    arguments = [*options, "--smoke", "--out", str(out)]
    started = time.monotonic()
    child = subprocess.run([sys.executable, "-m", f"benchmarks.scenarios.{module}", *arguments],
                           cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                           timeout=230)
    print(f"{scenario} --smoke: {time.monotonic() - started:.1f} s")
    assert child.returncode == 0, f"{scenario} --smoke failed:\n{child.stdout[-3000:]}\n{child.stderr[-3000:]}"
    results = json.loads(out.read_text())
    assert results["command"] == f"python -m benchmarks.scenarios.{module} {' '.join(arguments)}"
    assert all(math.isfinite(n) for n in _numbers(results)), f"{scenario}: a figure is not finite"
    assert scenario in SANE, f"{scenario}: add the check of its smoke figures to SANE"
    assert SANE[scenario](results), f"{scenario}: insane figures: {json.dumps(results)[:3000]}"


def test_suite_warm_up_twice_on_one_metadata_store(stack: DevStack, engine: sa.Engine, spark: Any) -> None:
    """The suite warms Spark up again when it changes the core count: a second warm-up must not fail."""
    from benchmarks.suite.runs import _warm_up

    for _ in range(2):
        _warm_up(spark, engine, stack.settings(), stack.bootstrap_servers)
