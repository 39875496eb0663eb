"""``overlord compaction|retention|datasource ...``: Druid's coordinator calls from the command line.

They talk to a running overlord (``--url``, credentials and exit codes as the ``supervisor``
commands'). Dropping asks for confirmation on a terminal; scripts pass ``--yes``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

from overlord.cli.client import ClientError, Command, Output, OverlordClient, run_command, table

__all__ = ["add_storage_commands"]

COORDINATOR = "/druid/coordinator/v1"


def _at(client: OverlordClient, path: str) -> str:
    return f"{client.url}{COORDINATOR}{path}"


def _name(text: str) -> str:
    return quote(text, safe="")


def _size(n: int) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 100_000 else f"{n / 1e3:.1f} KB"


def _compaction_status(client: OverlordClient, args: argparse.Namespace) -> Output:
    params = {"dataSource": args.datasource} if args.datasource else {}
    answer = client.request("GET", _at(client, "/compaction/status"), params=params)
    lines = []
    for s in answer["latestStatus"]:
        config = s["config"]
        which = ("off" if config is None else
                 f"{'default' if s['defaultConfig'] else 'own'} config, skipOffsetFromLatest "
                 f"{config['skipOffsetFromLatest']}")
        last = s["lastRun"]
        ran = f"{last['status']} at {last['started']}" if last else "none"
        lines.append(f"{s['dataSource']}: {which}; {s['segmentCountAwaitingCompaction']} segment(s) awaiting; "
                     f"last run {ran}; "
                     f"next run {s['nextRun'] or 'not scheduled'}")
        rows = [["interval", "segments", "avg size", "state", "awaiting"]]
        rows += [[i["interval"], str(i["segments"]), _size(i["avgBytes"]), "settled" if i["settled"] else "fresh",
                  str(i["awaitingCompaction"])] for i in s["intervals"]]
        lines.append(table(rows) if len(rows) > 1 else "  no visible segments")
    return "\n".join(lines) or "no datasources", answer


def _compaction_set(client: OverlordClient, args: argparse.Namespace) -> Output:
    body: dict[str, Any] = {"dataSource": args.datasource, "skipOffsetFromLatest": args.skip_offset_from_latest}
    if args.max_rows_per_segment:
        body["maxRowsPerSegment"] = args.max_rows_per_segment
    answer = client.request("POST", _at(client, "/config/compaction"), json=body)
    return f"compaction config of {args.datasource} set: {json.dumps(body)}", answer


def _compaction_delete(client: OverlordClient, args: argparse.Namespace) -> Output:
    answer = client.request("DELETE", _at(client, f"/config/compaction/{_name(args.datasource)}"))
    return f"compaction config of {args.datasource} removed (the default applies to a supervisor's)", answer


def _rules_show(client: OverlordClient, args: argparse.Namespace) -> Output:
    rules = client.request("GET", _at(client, f"/rules/{_name(args.datasource)}"), params={"full": ""})
    return "\n".join(json.dumps(r) for r in rules), rules


def _rules_set(client: OverlordClient, args: argparse.Namespace) -> Output:
    text = args.rules
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text()
        except OSError as exc:
            raise ClientError(f"cannot read {text[1:]}: {exc.strerror}") from None
    try:
        rules = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ClientError(f"the rules are not JSON: {exc}", status=400) from None
    answer = client.request("POST", _at(client, f"/rules/{_name(args.datasource)}"), json=rules)
    return f"{len(rules)} retention rule(s) of {args.datasource} set; applied within a minute", answer


def _choice(args: argparse.Namespace) -> dict[str, Any] | None:
    if args.interval and args.segment:
        raise ClientError("give --interval or --segment, not both", status=400)
    return {"interval": args.interval} if args.interval else {"segmentIds": args.segment} if args.segment else None


def _confirmed(args: argparse.Namespace, question: str) -> None:
    if args.yes:
        return
    if not sys.stdin.isatty():
        raise ClientError(f"{question}: pass --yes to confirm (no terminal to ask on)", status=400)
    if input(f"{question}? [y/N] ").strip().lower() not in ("y", "yes"):
        raise ClientError("not confirmed: nothing was changed", status=400)


def _mark(used: bool) -> Command:
    def mark(client: OverlordClient, args: argparse.Namespace) -> Output:
        choice, path = _choice(args), f"/datasources/{_name(args.datasource)}"
        what = (f"{args.datasource} {choice.get('interval') or ', '.join(choice['segmentIds'])}" if choice
                else f"every segment of {args.datasource}")
        if not used:
            _confirmed(args, f"drop {what} (queries stop seeing it; it can be restored until it is killed)")
        if choice is None:
            answer = client.request("POST" if used else "DELETE", _at(client, path))
        else:
            answer = client.request("POST", _at(client, f"{path}/{'markUsed' if used else 'markUnused'}"), json=choice)
        return f"{'restored' if used else 'dropped'} {answer['numChangedSegments']} segment(s) of {what}", answer

    return mark


def add_storage_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``compaction``, ``retention`` and ``datasource`` on the ``overlord`` command's subparsers."""
    compaction = sub.add_parser("compaction", help="auto-compaction of a running overlord: state and configs")
    verbs = compaction.add_subparsers(dest="compaction_command", required=True)
    status = verbs.add_parser("status", parents=[common], help="config, last and next run, and per interval the "
                                                               "segments, their average size and how many await")
    status.add_argument("datasource", nargs="?", help="default: every datasource")
    status.set_defaults(func=run_command(_compaction_status))
    set_config = verbs.add_parser("set", parents=[common], help="give a datasource its own config (replaces the "
                                                                "default)")
    set_config.add_argument("datasource", help="the datasource's name")
    set_config.add_argument("--skip-offset-from-latest", default="P1D", metavar="PERIOD",
                            help="intervals ending this long before the newest one's end are compacted whole "
                                 "(ISO-8601, default: %(default)s, Druid's)")
    set_config.add_argument("--max-rows-per-segment", type=int, help="default: the supervisor spec's")
    set_config.set_defaults(func=run_command(_compaction_set))
    delete = verbs.add_parser("delete", parents=[common], help="remove a datasource's own config")
    delete.add_argument("datasource", help="the datasource's name")
    delete.set_defaults(func=run_command(_compaction_delete))

    retention = sub.add_parser("retention", help="retention rules of a running overlord (Druid's load/drop rules)")
    verbs = retention.add_subparsers(dest="retention_command", required=True)
    show = verbs.add_parser("show", parents=[common], help="a datasource's rules, then the _default ones")
    show.add_argument("datasource", help="the datasource's name, or _default")
    show.set_defaults(func=run_command(_rules_show))
    set_rules = verbs.add_parser("set", parents=[common], help="replace a datasource's rules")
    set_rules.add_argument("datasource", help="the datasource's name, or _default")
    set_rules.add_argument("rules", help='a JSON list, e.g. \'[{"type": "loadByPeriod", "period": "P30D"}, '
                                         '{"type": "dropForever"}]\', or @FILE; [] removes them')
    set_rules.set_defaults(func=run_command(_rules_set))

    datasource = sub.add_parser("datasource", help="drop (mark unused) or restore a datasource's segments")
    verbs = datasource.add_subparsers(dest="datasource_command", required=True)
    for name, used, help_text in (("drop", False, "drop segments: queries and compaction stop seeing them, the kill "
                                   "duty deletes them a day later; ingestion goes on"),
                                  ("restore", True, "restore dropped segments that were not killed yet")):
        parser = verbs.add_parser(name, parents=[common], help=help_text)
        parser.add_argument("datasource", help="the datasource's name")
        parser.add_argument("--interval", help="START/END (ISO-8601): only segments inside it (default: all)")
        parser.add_argument("--segment", action="append", metavar="ID", help="only this segment (repeatable)")
        if not used:
            parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")
        parser.set_defaults(func=run_command(_mark(used)))
