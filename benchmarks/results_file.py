"""Where a benchmark writes its figures, with the command that made them, and its ``--smoke`` mode.

Every scenario parses its arguments with :func:`parse_args` (which adds ``--smoke``) and writes
with :func:`save_results`: a name goes under ``benchmarks/results`` (under a temporary directory in
smoke mode, so a smoke run never replaces a current figure), a path is taken as it is.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
SMOKE_RESULTS = Path(tempfile.gettempdir()) / "benchmarks-smoke"


def parse_args(parser: argparse.ArgumentParser, smoke: dict[str, Any],
               argv: list[str] | None = None) -> argparse.Namespace:
    """``parser``'s arguments plus ``--smoke``, which replaces the arguments named in ``smoke`` by tiny values."""
    parser.add_argument("--smoke", action="store_true",
                        help="a run of seconds on the same code path (meaningless figures), written under "
                             f"{SMOKE_RESULTS} unless --out/--output says where; tiny: {smoke}")
    args = parser.parse_args(argv)
    if args.smoke:
        vars(args).update(smoke)
    return args


def command_line(argv: list[str] | None = None) -> str:
    """How this process was started, as ``python -m package.module args...``."""
    argv = sys.argv if argv is None else argv
    program = Path(argv[0]).resolve()
    try:
        name = "python -m " + ".".join(program.relative_to(REPO).with_suffix("").parts).removesuffix(".__main__")
    except ValueError:
        name = shlex.join(["python", argv[0]])
    return " ".join([name, *map(shlex.quote, argv[1:])])


def save_results(results: dict[str, Any], out: str | Path, smoke: bool = False) -> Path:
    """Write ``results`` headed by the command line to ``out`` (a name under the results directory, or a path)."""
    path = (SMOKE_RESULTS if smoke else RESULTS) / out
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"command": command_line(), **results}, indent=2, default=str) + "\n"
    path.write_text(text)
    print(text if len(text) < 4000 else "", f"written to {path}", sep="")
    return path
