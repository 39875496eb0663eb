"""Run the benchmark suite: ``python -m benchmarks [--quick] [--events N] [--shapes ...] [--scaling]``.

Writes ``benchmarks/results/suite.json`` (machine, versions, parameters, every figure) and
``benchmarks/results/suite.md`` (the summary tables and the targets).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.suite.plan import TARGET_SHAPES, Options, run_suite
from benchmarks.suite.report import derive, markdown
from benchmarks.suite.shapes import DRUID_SHAPES

RESULTS = Path(__file__).parent / "results"


def parse_args(argv: list[str]) -> tuple[Options, Path, bool]:
    """The suite's options, the output directory, and whether to only rewrite the report."""
    names = [s.name for s in DRUID_SHAPES]
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, help="events per Druid shape (default 1,000,000)")
    parser.add_argument("--peer-events", type=int, help="events of the Quix Streams peer topics (default 500,000)")
    parser.add_argument("--shapes", nargs="+", choices=names, metavar="SHAPE",
                        help=f"Druid shapes to run (default all): {', '.join(repr(n) for n in names)}")
    parser.add_argument("--peer-shapes", nargs="*", choices=names, metavar="SHAPE",
                        help=f"shapes with a Quix Streams peer run (default {', '.join(TARGET_SHAPES)}; none: skip)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeat", type=int, help="runs of each system but Quix per topic, best counts (default 2)")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 100k events per shape, 30k per peer topic, smaller profile")
    parser.add_argument("--scaling", nargs="*", type=int, metavar="EVENTS",
                        help="also run the growth series (default 1M 4M 16M events of 1 low-cardinality dimension)")
    parser.add_argument("--no-cores", action="store_true", help="skip indexing with 1 vs all Spark cores")
    parser.add_argument("--no-profile", action="store_true", help="skip the cProfile of the worker's hot path")
    parser.add_argument("--output", type=Path, default=RESULTS, help="directory for suite.json and suite.md")
    parser.add_argument("--report-only", action="store_true",
                        help="measure nothing: rewrite suite.md (and the targets) from the output's suite.json")
    args = parser.parse_args(argv)
    options = Options(partitions=args.partitions, cores=not args.no_cores, profile=not args.no_profile)
    if args.quick:
        options.events, options.peer_events, options.profile_events, options.repeat = 100_000, 30_000, 100_000, 1
    if args.events:
        options.events = args.events
    if args.repeat:
        options.repeat = args.repeat
    if args.peer_events:
        options.peer_events = args.peer_events
    if args.shapes:
        options.shapes = args.shapes
    if args.peer_shapes is not None:
        options.peer_shapes = args.peer_shapes
    if args.scaling is not None:
        options.scaling = args.scaling or [1_000_000, 4_000_000, 16_000_000]
    return options, args.output, args.report_only


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    options, output, report_only = parse_args(argv)
    if report_only:
        results = json.loads((output / "suite.json").read_text())
    else:
        results = run_suite(options)
        results["command"] = " ".join(["python -m benchmarks", *argv])
    derive(results)
    output.mkdir(parents=True, exist_ok=True)
    (output / "suite.json").write_text(json.dumps(results, indent=2) + "\n")
    summary = markdown(results)
    (output / "suite.md").write_text(summary)
    print(summary)
    print(f"written to {output / 'suite.json'} and {output / 'suite.md'}")


if __name__ == "__main__":
    main()
