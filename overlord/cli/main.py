"""The ``overlord`` command line."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlalchemy as sa

    from specs import SupervisorSpec

__all__ = ["main"]


def _exit_on_sigterm() -> None:
    """Turn SIGTERM into the same clean unwinding as Ctrl-C."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)


def _cmd_dev_up(args: argparse.Namespace) -> int:
    from overlord.dev.stack import dev_stack

    with dev_stack(Path(args.workdir) if args.workdir else None) as stack:
        if args.json:
            print(json.dumps(stack.as_env()), flush=True)
        else:
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


def _disagrees_with_history(engine: sa.Engine, spec: SupervisorSpec) -> bool:
    """Whether ``spec`` redefines a column the datasource's stored specs or segments defined (and say so).

    Published rows were aggregated as those say: a spec file that says otherwise would index
    or merge them another way (the rule :func:`specs.check_columns`).
    """
    from indexing_task.published_columns import check_against_segments
    from overlord.supervisor.metadata_store import MetadataStore
    from specs import SpecError, check_update

    try:
        check_update(MetadataStore(engine).datasource_history(spec.datasource), spec)
        check_against_segments(engine, spec)
    except SpecError as exc:
        print(f"the spec disagrees with the datasource's published columns: {exc}", file=sys.stderr)
        return True
    return False


def _cmd_index(args: argparse.Namespace) -> int:
    from indexing_task.spark import get_spark
    from overlord.config import Settings
    from overlord.supervisor.task_ranges import index_once
    from overlord.task_report_text import as_json, format_report
    from segment_store import upgrade_schema
    from segment_store.database import metadata_engine
    from specs import load_supervisor_spec

    spec = load_supervisor_spec(Path(args.spec).read_bytes())
    for path in spec.ignored_fields:
        logging.getLogger(__name__).warning("spec field %s is accepted but not used", path)
    settings = Settings.from_env()
    engine = metadata_engine(settings.database_url)
    upgrade_schema(engine)
    if _disagrees_with_history(engine, spec):
        return 2
    report = index_once(get_spark(settings.spark_master, settings.spark_conf), engine, settings, spec)
    print(as_json(report) if args.json else format_report(report))
    return 0 if report.outcome.ok else 2


def _cmd_segments(args: argparse.Namespace) -> int:
    from overlord.config import Settings
    from overlord.task_report_text import as_json
    from segment_store import committed_offsets, used_segments
    from segment_store.database import metadata_engine

    engine = metadata_engine(Settings.from_env().database_url)
    segments, stored = used_segments(engine, args.datasource), committed_offsets(engine, args.datasource)
    if args.json:
        print(as_json({"segments": segments, "committedOffsets": stored.offsets if stored else None}))
        return 0
    for seg in segments:
        print(f"{seg.interval_start:%Y-%m-%dT%H:%M}/{seg.interval_end:%Y-%m-%dT%H:%M} v{seg.version} "
              f"p{seg.partition_num} rows={seg.num_rows} bytes={seg.size_bytes} {seg.path}")
    print("committed offsets:", json.dumps(stored.offsets.to_json()) if stored else "none")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from overlord.dev.demo import run_demo

    return run_demo(events=args.events, partitions=args.partitions)


def _cmd_quickstart(args: argparse.Namespace) -> int:
    from overlord.dev.quickstart import run_quickstart

    return run_quickstart(rate=args.rate, port=args.port)


def _cmd_query(args: argparse.Namespace) -> int:
    """SQL through the running overlord's API (``--url``), or with ``--local`` on a Spark of this process."""
    if not args.local:
        from overlord.cli.client import ClientError, OverlordClient, format_rows

        try:
            rows = OverlordClient(args.url).sql(args.sql)
        except ClientError as exc:
            print(f"query failed: {exc}", file=sys.stderr)
            return exc.exit_code
        print(json.dumps(rows, indent=2) if args.json else format_rows(rows))
        return 0
    from indexing_task.spark import get_spark
    from overlord.config import Settings
    from overlord.query.engine import QueryLimits, execute_sql
    from overlord.query.formats import format_table
    from overlord.query.local_engine import LocalEngine
    from overlord.query.query_errors import QueryError
    from segment_store.database import metadata_engine

    settings = Settings.from_env()
    try:
        spark = get_spark(settings.spark_master, settings.spark_conf)
        result = execute_sql(spark, metadata_engine(settings.database_url), args.sql,
                             limits=QueryLimits.from_settings(settings), local=LocalEngine.from_settings(settings))
    except QueryError as exc:
        print(f"query failed: {exc.message}", file=sys.stderr)
        return 2
    print(json.dumps(result.table.to_pylist(), indent=2, default=str) if args.json else format_table(result))
    return 0


def _utc_interval(text: str) -> tuple[datetime, datetime]:
    """``START/END`` in ISO-8601 (UTC unless an offset is given), like Druid's intervals."""
    from specs.durations import parse_utc_interval  # here: importing specs costs HTTP-only commands ~0.9 s

    try:
        return parse_utc_interval(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _iso_duration(text: str) -> timedelta:
    from specs import SpecError, parse_iso_duration

    try:
        return parse_iso_duration(text)
    except SpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _cmd_compact(args: argparse.Namespace) -> int:
    from indexing_task.compaction_job import compact
    from indexing_task.spark import get_spark
    from overlord.config import Settings
    from overlord.task_report_text import as_json
    from segment_store import upgrade_schema
    from segment_store.database import metadata_engine
    from specs import load_supervisor_spec

    spec = load_supervisor_spec(Path(args.spec).read_bytes())
    if spec.datasource != args.datasource:
        print(f"the spec is for datasource {spec.datasource!r}, not {args.datasource!r}", file=sys.stderr)
        return 2
    settings = Settings.from_env()
    engine = metadata_engine(settings.database_url)
    upgrade_schema(engine)
    if _disagrees_with_history(engine, spec):
        return 2
    spark = get_spark(settings.spark_master, settings.spark_conf)
    reports = compact(spark, engine, spec, settings.deep_storage, args.interval,
                      max_rows_per_segment=args.max_rows_per_segment)
    ok = all(r.outcome.ok for r in reports)
    if args.json:
        print(as_json(reports))
        return 0 if ok else 2
    if not reports:
        print(f"nothing to compact in {args.datasource}: no interval has two or more visible segments")
    for r in reports:
        n, outcome = len(r.output_segments), r.outcome
        status = outcome.status.upper() + ("" if outcome.ok else f" - {outcome.message}")
        print(f"{r.interval_start:%Y-%m-%dT%H:%M:%SZ}/{r.interval_end:%Y-%m-%dT%H:%M:%SZ}  "
              f"{r.input_segments} segments ({r.input_rows:,} rows) -> {n} segment{'s' if n != 1 else ''} "
              f"({r.output_rows:,} rows), version {outcome.version}, "
              f"{len(outcome.carried_over)} appended carried over: {status}")
    return 0 if ok else 2


def _cmd_cleanup(args: argparse.Namespace) -> int:
    from overlord.config import Settings
    from overlord.coordinator.table_export import TableExport
    from overlord.task_report_text import as_json
    from segment_store import DeepStorage, cleanup, upgrade_schema
    from segment_store.database import metadata_engine

    settings = Settings.from_env()
    engine = metadata_engine(settings.database_url)
    upgrade_schema(engine)
    report = cleanup(engine, DeepStorage(settings.deep_storage), args.datasource, retention=args.retention,
                     orphan_grace=args.orphan_grace, keep=TableExport(settings, engine).protected(),
                     dry_run=args.dry_run)
    if args.json:
        print(as_json(report))
        return 0
    verb = "would delete" if report.dry_run else "deleted"
    print(f"cleanup of {len(report.datasources)} datasource(s): {verb} {len(report.unused_segments)} unused "
          f"segment(s) and {len(report.orphan_files)} orphan file(s), {report.bytes_deleted:,} bytes; "
          f"kept {report.young_orphans_kept} unreferenced file(s) younger than the grace period")
    for path in report.orphan_files if args.verbose else ():
        print(f"  orphan {path}")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from overlord.config import Settings
    from overlord.coordinator.restore_check import check_restore
    from overlord.task_report_text import as_json
    from segment_store import upgrade_schema
    from segment_store.database import metadata_engine

    settings = Settings.from_env()
    engine = metadata_engine(settings.database_url)
    upgrade_schema(engine)
    report = check_restore(settings, engine)
    if args.json:
        print(as_json({**report.__dict__, "consistent": report.consistent}))
        return 0 if report.consistent else 1
    verdict = "consistent" if report.consistent else "NOT consistent"
    print(f"metadata store against deep storage and the topics: {verdict}")
    print("- overlords: " + ("one holds the leader lock; stop every overlord before restoring and verifying"
                             if report.overlord_running else "none running"))
    print(f"- used segments: {report.used_segments:,}; files missing or damaged: {len(report.missing)}")
    for m in report.missing:
        source = f"published by task {m.published_by}" if m.published_by else "publisher unknown"
        ranges = f", offsets {dict(m.offsets['start'])} to {dict(m.offsets['end'])}" if m.offsets else ""
        print(f"    {m.datasource} {m.interval} {m.id}: {m.problem}; {source}{ranges}")
    print(f"- topics: {len(report.lost_records)} partition(s) lost records, {len(report.unreachable)} unreachable")
    for line in [*report.lost_records, *report.unreachable]:
        print(f"    {line}")
    print(f"- files without rows (publishes after the backup; the kill duty deletes them): {report.orphan_files:,}")
    return 0 if report.consistent else 1


def _cmd_db(args: argparse.Namespace) -> int:
    from overlord.config import Settings
    from segment_store.database import metadata_engine
    from segment_store.migrate import current_revision, head_revision, upgrade_schema

    engine = metadata_engine(Settings.from_env().database_url)
    if args.db == "current":
        current = current_revision(engine)
        print(json.dumps({"revision": current, "head": head_revision()}) if args.json else
              f"{current or 'none (a new store, or one of release 0.1.0)'} (this release's newest: {head_revision()})")
        return 0
    before = upgrade_schema(engine)
    print(json.dumps({"revision": head_revision(), "was": before}) if args.json else
          f"metadata store at revision {head_revision()}" + (
              " already" if before == head_revision() else f" (was {before or 'none'})"))
    return 0


def _parser() -> argparse.ArgumentParser:
    from overlord.cli.client import DEFAULT_URL, add_commands, common_options  # serve, supervisor ...
    from overlord.cli.storage import add_storage_commands  # compaction, retention, datasource

    parser = argparse.ArgumentParser(prog="overlord", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--log-format", choices=("text", "json"), default="text",
                        help="log lines as text or as one JSON object each (for log pipelines; default: text)")
    sub = parser.add_subparsers(dest="command", required=True)

    dev = sub.add_parser("dev", help="the embedded development stack").add_subparsers(dest="dev", required=True)
    up = dev.add_parser("up", help="start a Tansu broker and PostgreSQL, print their settings, wait")
    up.add_argument("--workdir", help="directory for PostgreSQL data and deep storage (default: a temp dir)")
    up.add_argument("--json", action="store_true", help="print the settings as one JSON object (then wait)")
    up.set_defaults(func=_cmd_dev_up)

    index = sub.add_parser("index", help="index a datasource once, from its committed offsets to the end "
                                         "of its topic now, and publish")
    index.add_argument("spec", help="supervisor spec JSON file (Druid's Kafka supervisor format)")
    index.add_argument("--json", action="store_true", help="print the task's report as JSON")
    index.set_defaults(func=_cmd_index)

    segments = sub.add_parser("segments", help="list a datasource's published segments and offsets")
    segments.add_argument("datasource", help="the datasource's name")
    segments.add_argument("--json", action="store_true", help="print the segment records and offsets as JSON")
    segments.set_defaults(func=_cmd_segments)

    demo = sub.add_parser("demo", help="start the embedded stack, produce sample events, index them, "
                                       "query the published segments")
    demo.add_argument("--events", type=int, default=200_000, help="sample events to produce (default: %(default)s)")
    demo.add_argument("--partitions", type=int, default=4, help="partitions of the sample topic (default: %(default)s)")
    demo.set_defaults(func=_cmd_demo)

    quick = sub.add_parser("quickstart", help="run the service on the embedded stack with a live sample producer "
                                              "and the example supervisor; prints the console's URL; Ctrl-C stops")
    quick.add_argument("--rate", type=int, default=500, help="sample events per second (default: %(default)s)")
    quick.add_argument("--port", type=int, default=8090, help="the console's port, if free (default: %(default)s)")
    quick.set_defaults(func=_cmd_quickstart)

    query = sub.add_parser("query", help="run a read-only SQL query (Druid SQL) over published segments, through "
                                         "the running overlord's API")
    query.add_argument("sql", help="e.g. 'SELECT country, SUM(\"count\") AS events FROM events GROUP BY 1'")
    query.add_argument("--url", default=os.environ.get("OVERLORD_URL", DEFAULT_URL),
                       help=f"overlord base URL (default: $OVERLORD_URL or {DEFAULT_URL})")
    query.add_argument("--local", action="store_true", help="run it on a Spark of this process instead, reading "
                                                            "OVERLORD_DATABASE_URL and deep storage directly")
    query.add_argument("--json", action="store_true", help="print the rows as JSON objects")
    query.set_defaults(func=_cmd_query)

    compact = sub.add_parser("compact", help="rewrite a datasource's small segments into fewer, larger ones "
                                             "under a new version (Spark job)")
    compact.add_argument("datasource", help="the datasource's name")
    compact.add_argument("--json", action="store_true", help="print the interval reports as JSON")
    compact.add_argument("--spec", required=True, help="the datasource's supervisor spec (how metrics merge)")
    compact.add_argument("--interval", type=_utc_interval, help="START/END: compact only intervals inside it")
    compact.add_argument("--max-rows-per-segment", type=int, help="default: the spec's maxRowsPerSegment")
    compact.set_defaults(func=_cmd_compact)

    clean = sub.add_parser("cleanup", help="delete files of long-unused segments and orphan files of tasks "
                                           "that never published")
    clean.add_argument("datasource", nargs="?", help="default: every datasource")
    clean.add_argument("--retention", type=_iso_duration, default=timedelta(days=1),
                       help="keep unused segments this long (ISO-8601, default P1D)")
    clean.add_argument("--orphan-grace", type=_iso_duration, default=timedelta(days=1),
                       help="keep unreferenced files this long (ISO-8601, default P1D)")
    clean.add_argument("--dry-run", action="store_true", help="only report what would be deleted")
    clean.add_argument("--json", action="store_true", help="print the report as JSON")
    clean.set_defaults(func=_cmd_cleanup)

    verify = sub.add_parser("verify", help="after restoring the metadata store, before starting overlords: check it "
                                           "against deep storage and the topics (exit code 1 if not consistent)")
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    verify.set_defaults(func=_cmd_verify)

    db = sub.add_parser("db", help="the metadata store's schema (overlord serve upgrades it at start-up too)")
    db_sub = db.add_subparsers(dest="db", required=True)
    for name, text in (("upgrade", "apply the migrations it lacks (safe while overlords run)"),
                       ("current", "print its schema revision")):
        command = db_sub.add_parser(name, help=text)
        command.add_argument("--json", action="store_true", help='print {"revision", ...} as JSON')
        command.set_defaults(func=_cmd_db)

    add_commands(sub)
    add_storage_commands(sub, common_options())
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``overlord ARGS``; returns the exit code."""
    args = _parser().parse_args(argv)
    from indexing_task.child_processes import ignore_working_directory
    from overlord.logs import configure_logging

    ignore_working_directory()  # the Spark workers and the processes this command starts: see child_processes

    configure_logging(logging.DEBUG if args.verbose else logging.INFO, args.log_format)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    logging.getLogger("pyiceberg").setLevel(logging.WARNING)  # "Loaded FileIO" on every table load
    logging.getLogger("alembic").setLevel(logging.WARNING)  # segment_store.migrate says what it upgraded
    if not args.verbose:  # each HTTP request of the client at INFO is noise to a script reading stderr
        logging.getLogger("httpx").setLevel(logging.WARNING)
    # A supervisor woken while it runs is skipped once by APScheduler and rerun right after: not news.
    logging.getLogger("apscheduler.scheduler").setLevel(logging.ERROR)
    _exit_on_sigterm()
    from indexing_task.task_errors import IndexingError
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
