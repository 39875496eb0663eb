"""The ``overlord`` command line."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from pathlib import Path
from types import FrameType

__all__ = ["main"]


def _exit_on_sigterm() -> None:
    """Turn SIGTERM into the same clean unwinding as Ctrl-C."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)


def _cmd_dev_up(args: argparse.Namespace) -> int:
    from overlord.devstack import dev_stack

    with dev_stack(Path(args.workdir) if args.workdir else None) as stack:
        print("Embedded stack is up. Use these settings in another shell:")
        for key, value in stack.as_env().items():
            print(f"export {key}='{value}'")
        print("Press Ctrl-C to stop.", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            print("stopping the embedded stack")
    return 0


def _cmd_index(args: argparse.Namespace) -> int:
    import sqlalchemy as sa

    from indexing_task.spark import get_spark
    from overlord.config import Settings
    from overlord.index_once import index_once
    from overlord.report import format_report
    from segment_store import create_schema
    from specs import load_supervisor_spec

    spec = load_supervisor_spec(Path(args.spec).read_bytes())
    for path in spec.ignored_fields:
        logging.getLogger(__name__).warning("spec field %s is accepted but not used", path)
    settings = Settings.from_env()
    engine = sa.create_engine(settings.database_url)
    create_schema(engine)
    report = index_once(get_spark(settings.spark_master), engine, settings, spec)
    print(format_report(report))
    return 0 if report.outcome.ok else 2


def _cmd_segments(args: argparse.Namespace) -> int:
    import sqlalchemy as sa

    from overlord.config import Settings
    from segment_store import committed_offsets, used_segments

    engine = sa.create_engine(Settings.from_env().database_url)
    for seg in used_segments(engine, args.datasource):
        print(f"{seg.interval_start:%Y-%m-%dT%H:%M}/{seg.interval_end:%Y-%m-%dT%H:%M} v{seg.version} "
              f"p{seg.partition_num} rows={seg.num_rows} bytes={seg.size_bytes} {seg.path}")
    stored = committed_offsets(engine, args.datasource)
    print("committed offsets:", json.dumps(dict(stored.offsets)) if stored else "none")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from overlord.demo import run_demo

    return run_demo(events=args.events, partitions=args.partitions)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="overlord", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    dev = sub.add_parser("dev", help="the embedded development stack").add_subparsers(dest="dev", required=True)
    up = dev.add_parser("up", help="start a Tansu broker and PostgreSQL, print their settings, wait")
    up.add_argument("--workdir", help="directory for PostgreSQL data and deep storage (default: a temp dir)")
    up.set_defaults(func=_cmd_dev_up)

    index = sub.add_parser("index", help="index a datasource once, from its committed offsets to the end "
                                         "of its topic now, and publish")
    index.add_argument("spec", help="supervisor spec JSON file (Druid's Kafka supervisor format)")
    index.set_defaults(func=_cmd_index)

    segments = sub.add_parser("segments", help="list a datasource's published segments and offsets")
    segments.add_argument("datasource")
    segments.set_defaults(func=_cmd_segments)

    demo = sub.add_parser("demo", help="start the embedded stack, produce sample events, index them, "
                                       "query the published segments")
    demo.add_argument("--events", type=int, default=200_000)
    demo.add_argument("--partitions", type=int, default=4)
    demo.set_defaults(func=_cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    # A supervisor woken while it runs is skipped once by APScheduler and rerun right after: not news.
    logging.getLogger("apscheduler.scheduler").setLevel(logging.ERROR)
    _exit_on_sigterm()
    from indexing_task.errors import IndexingError
    from specs import SpecError

    try:
        return int(args.func(args))
    except SpecError as exc:
        print(f"invalid supervisor spec: {exc}", file=sys.stderr)
        return 2
    except IndexingError as exc:
        print(f"indexing failed, nothing was published: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
