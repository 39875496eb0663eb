"""Before/after in one run: the indexing task of a git ref against the working tree, on the same topics.

The ref's ``indexing_task`` package is exported to a temporary directory under another
name (``indexing_task_ref``), importable by the driver and by Spark's Python workers, so
both versions run in the same process on the same warm Spark session, alternately
(``--worker``: the worker code alone, in this process, measured in CPU time per event):

    python -m benchmarks.scenarios.ab --ref HEAD --events 1000000 --repeat 3
    python -m benchmarks.scenarios.ab --ref HEAD --worker --events 1000000 --repeat 5
    python -m benchmarks.scenarios.ab --transforms --events 1000000 --repeat 5   # plain vs filter, transforms, theta
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import io
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from benchmarks.results_file import parse_args, save_results
from benchmarks.suite.runs import Bench, new_topic, scratch_stack, spec_for
from benchmarks.suite.shapes import shape_by_name
from benchmarks.suite.topics import delete_topics
from overlord.supervisor.task_ranges import next_task_request
from segment_store import upgrade_schema
from specs import SupervisorSpec, load_supervisor_spec

ALIAS = "indexing_task_ref"

REPO = Path(__file__).resolve().parents[2]
"""The repository root (git commands and PYTHONPATH)."""


def export_ref(ref: str) -> Path:
    """Write the ref's indexing_task as package ``indexing_task_ref`` under a new directory; return it.

    ``ref`` is a git ref, or a directory holding an ``indexing_task`` package (a variant to compare).
    """
    root = Path(tempfile.mkdtemp(prefix="bench_ab_"))
    if Path(ref, "indexing_task").is_dir():
        shutil.copytree(Path(ref, "indexing_task"), root / ALIAS, ignore=shutil.ignore_patterns("__pycache__"))
    else:
        archive = subprocess.run(["git", "archive", ref, "indexing_task"], check=True, capture_output=True,
                                 cwd=REPO).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(root, filter="data")
        (root / "indexing_task").rename(root / ALIAS)
    for path in (root / ALIAS).glob("*.py"):
        path.write_text(path.read_text().replace("indexing_task.", f"{ALIAS}."))
    return root


def _task_runner(package: str) -> Any:
    return importlib.import_module(f"{package}.task").run_index_task


def _index(bench: Bench, runner: Any, shape_name: str, topic: str, events: int) -> float:
    shape = shape_by_name(shape_name)
    spec = spec_for(f"ab_{uuid.uuid4().hex[:10]}", topic, shape.low, shape.high)
    request = next_task_request(bench.engine, bench.settings, spec)
    started = time.monotonic()
    report = runner(bench.spark, bench.engine, request)
    elapsed = time.monotonic() - started
    if not report.outcome.ok or report.records != events:
        raise RuntimeError(f"{topic}: {report.outcome}, {report.records} of {events} records")
    return events / elapsed


def with_transforms(spec: SupervisorSpec) -> SupervisorSpec:
    """``spec`` plus a filter (keeps ~90%), two transforms, a filtered aggregator and a theta sketch.

    The sketch counts the first high-cardinality dimension (``low0`` in a shape without one).
    """
    raw = spec.to_druid_json()
    schema = raw["spec"]["dataSchema"]
    schema["transformSpec"] = {
        "transforms": [{"type": "expression", "name": "low0", "expression": "concat(low0, '-', upper(low0))"},
                       {"type": "expression", "name": "value", "expression": "value * 2"}],
        "filter": {"type": "bound", "dimension": "value", "lower": "100", "ordering": "numeric"}}
    schema["metricsSpec"].append({"type": "filtered", "filter": {"type": "in", "dimension": "low0",
                                                                 "values": ["v1", "v2", "v3"]},
                                  "aggregator": {"type": "longSum", "name": "some_sum", "fieldName": "value"}})
    dimensions = [d["name"] for d in schema["dimensionsSpec"]["dimensions"]]
    counted = next((d for d in dimensions if d.startswith("high")), dimensions[0])
    schema["metricsSpec"].append({"type": "thetaSketch", "name": f"distinct_{counted}", "fieldName": counted})
    return load_supervisor_spec(raw)


def _module(package: str, *names: str) -> Any:
    """The first module of ``names`` that ``package`` has: one renamed since ``--ref`` is found by either name."""
    for name in names:
        if importlib.util.find_spec(f"{package}.{name}") is not None:
            return importlib.import_module(f"{package}.{name}")
    raise ModuleNotFoundError(f"{package} has none of the modules {', '.join(names)}")


def _worker_cost(bench: Bench, package: str, shape_name: str, topic: str, ends: dict[int, int],
                 events: int, transformed: bool = False) -> tuple[float, float]:
    """``index_split`` of every partition in this process, no Spark: (events/s, CPU µs per event).

    CPU time counts every thread of the process (librdkafka's included), so it is far less
    sensitive to other load on the machine than wall time.
    """
    worker = _module(package, "spark_worker", "worker")
    ranges = _module(package, "offset_ranges", "ranges")
    reader = _module(package, "reader")
    schema = _module(package, "rollup_schema", "rollup")
    shape = shape_by_name(shape_name)
    spec = spec_for(f"ab_{uuid.uuid4().hex[:8]}", topic, shape.low, shape.high)
    spec = with_transforms(spec) if transformed else spec
    payload = worker.TaskPayload(
        task_id=f"ab-{uuid.uuid4().hex[:8]}", datasource=spec.datasource, topic=topic,
        consumer_config=reader.consumer_config({"bootstrap.servers": bench.bootstrap}, "bench-ab"),
        rollup_schema=schema.RollupSchema.from_spec(spec.spec.data_schema),
        deep_storage=str(bench.workdir / "ab"), max_rows_in_memory=1_000_000,
        splits=tuple(ranges.Split(i, p, 0, end) for i, (p, end) in enumerate(sorted(ends.items()))))
    cpu, started = time.process_time(), time.monotonic()
    results = [worker.index_split(payload, split) for split in payload.splits]
    records = sum(r["records"] if isinstance(r, dict) else r.records for r in results)  # refs before WorkerResult
    wall, cpu = time.monotonic() - started, time.process_time() - cpu
    if records != events:
        raise RuntimeError(f"{topic}: {records} of {events} records")
    return events / wall, cpu / events * 1e6


def run_worker(ref: str, shapes: list[str], events: int, repeat: int, transforms: bool = False) -> dict[str, Any]:
    """Before/after of the worker alone, in this process, alternately on the same topic.

    With ``transforms``, "before" is the working tree on the plain spec and "after" the working
    tree on the spec :func:`with_transforms` makes: what a filter, transforms and a filtered
    aggregator cost.
    """
    if not transforms:
        sys.path.insert(0, str(export_ref(ref)))
    out: dict[str, Any] = {"ref": "plain spec" if transforms else ref, "mode": "worker", "events": events,
                           "repeat": repeat, "shapes": {}, "after": "with_transforms" if transforms else "working tree"}
    with scratch_stack() as (stack, workdir):
        bench = Bench(stack.bootstrap_servers, sa.create_engine(stack.database_url), None, 4,  # type: ignore[arg-type]
                      workdir=workdir)
        for name in shapes:
            made = new_topic(bench, shape_by_name(name), events)
            figures: dict[str, dict[str, list[float]]] = {v: {"per_s": [], "cpu_us": []} for v in ("before", "after")}
            for i in range(repeat + 1):
                for version in (("before", "after") if i % 2 == 0 else ("after", "before")):
                    package = ALIAS if version == "before" and not transforms else "indexing_task"
                    rate, cpu = _worker_cost(bench, package, name, made["topic"], made["ends"], events,
                                             transformed=transforms and version == "after")
                    if i:  # the first round warms the broker and both versions up
                        figures[version]["per_s"].append(round(rate))
                        figures[version]["cpu_us"].append(round(cpu, 3))
            med = {v: {k: statistics.median(x) for k, x in f.items()} for v, f in figures.items()}
            out["shapes"][name] = {**figures, "wall_ratio": round(med["after"]["per_s"] / med["before"]["per_s"], 3),
                                   "cpu_ratio": round(med["before"]["cpu_us"] / med["after"]["cpu_us"], 3)}
            print(f"[ab worker] {name}: CPU {med['before']['cpu_us']:.2f} -> {med['after']['cpu_us']:.2f} µs/event "
                  f"({out['shapes'][name]['cpu_ratio']:.2f}x), wall {med['before']['per_s']:,.0f} -> "
                  f"{med['after']['per_s']:,.0f}/s ({out['shapes'][name]['wall_ratio']:.2f}x)", flush=True)
            delete_topics(bench.bootstrap, [made["topic"]])
    return out


def run(ref: str, shapes: list[str], events: int, repeat: int) -> dict[str, Any]:
    root = export_ref(ref)
    sys.path.insert(0, str(root))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(root), str(REPO),
                                                os.environ.get("PYTHONPATH", "")])
    runners = {"before": _task_runner(ALIAS), "after": _task_runner("indexing_task")}
    out: dict[str, Any] = {"ref": ref, "events": events, "repeat": repeat, "shapes": {}}
    with scratch_stack() as (stack, workdir):
        engine = sa.create_engine(stack.database_url)
        upgrade_schema(engine)
        settings = stack.settings()
        bench = Bench(stack.bootstrap_servers, engine, settings, 4, workdir=workdir)
        bench.use_spark(os.cpu_count() or 2)
        for name in shapes:
            made = new_topic(bench, shape_by_name(name), events)
            _index(bench, runners["before"], name, made["topic"], events)  # warm both versions' workers
            _index(bench, runners["after"], name, made["topic"], events)
            rates: dict[str, list[float]] = {"before": [], "after": []}
            for i in range(repeat):
                order = ("before", "after") if i % 2 == 0 else ("after", "before")
                for version in order:
                    rates[version].append(_index(bench, runners[version], name, made["topic"], events))
            before, after = statistics.median(rates["before"]), statistics.median(rates["after"])
            out["shapes"][name] = {"before_per_s": [round(r) for r in rates["before"]],
                                   "after_per_s": [round(r) for r in rates["after"]],
                                   "median_ratio": round(after / before, 3)}
            print(f"[ab] {name}: before {before:,.0f}/s, after {after:,.0f}/s: {after / before:.2f}x", flush=True)
            delete_topics(bench.bootstrap, [made["topic"]])
        bench.spark.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", default="HEAD", help="git ref, or a directory with an indexing_task package")
    parser.add_argument("--shapes", nargs="+", default=["1 low", "10 low + 1 high"])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--worker", action="store_true",
                        help="compare the worker alone (index_split in this process: CPU time per event)")
    parser.add_argument("--transforms", action="store_true",
                        help="worker mode on the working tree: the plain spec against it with a filter, two "
                             "transforms, a filtered aggregator and a theta sketch (--ref is ignored)")
    parser.add_argument("--output", "--out", type=Path, default=None,
                        help="a name under benchmarks/results, or a path (default ab.json, ab_transforms.json "
                             "with --transforms)")
    args = parse_args(parser, {"shapes": ["1 low"], "events": 2_000, "repeat": 1})
    try:
        if args.worker or args.transforms:
            result = run_worker(args.ref, args.shapes, args.events, args.repeat, args.transforms)
        else:
            result = run(args.ref, args.shapes, args.events, args.repeat)
    finally:
        for path in sys.path:
            if Path(path).name.startswith("bench_ab_") and (Path(path) / ALIAS).is_dir():
                shutil.rmtree(path, ignore_errors=True)
    save_results(result, args.output or ("ab_transforms.json" if args.transforms else "ab.json"), args.smoke)


if __name__ == "__main__":
    main()
