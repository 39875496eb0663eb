"""``overlord serve`` and ``overlord supervisor ...``: the command line of the overlord's HTTP API.

The ``supervisor`` commands talk to a running overlord at ``--url`` (default: ``$OVERLORD_URL``
or ``http://127.0.0.1:8090``). ``--json`` prints the overlord's answer as JSON instead of a table.
A refusal is printed with the server's error message (and the JSON path of each bad field).
Exit codes, as every ``overlord`` command's: 0 done; 2 the request was refused (a 4xx other
than 429: bad input, unknown id, no permission; fix it); 1 it failed (unreachable, 429, 5xx;
retrying may help); 130 interrupted.
"""

from __future__ import annotations

import argparse
import functools
import getpass
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from overlord.overlord_errors import OverlordError

__all__ = ["ClientError", "Command", "OverlordClient", "Output", "add_commands", "common_options", "format_rows",
           "format_status", "run_command", "table"]

DEFAULT_URL = "http://127.0.0.1:8090"
PREFIX = "/druid/indexer/v1"


class ClientError(OverlordError):
    """The overlord could not be reached or refused the request; the message is the server's."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status

    @property
    def exit_code(self) -> int:
        """2 if the request was refused as it stands (a 4xx but 429), else 1 (see the module's docstring)."""
        return 2 if self.status is not None and 400 <= self.status < 500 and self.status != 429 else 1


class OverlordClient:
    """A thin synchronous client of ``/druid/indexer/v1``."""

    def __init__(self, url: str, timeout_s: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url + PREFIX, timeout=timeout_s, auth=_credentials())

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """Send a request and return the decoded JSON; raises :class:`ClientError` on 4xx/5xx or no answer."""
        try:
            response = self._http.request(method, path, **kwargs)
            if response.status_code in (307, 308) and (leader := response.headers.get("location")):
                # A standby sends leader-only calls to the leader: once, with the same body and credentials
                # (httpx's own redirects drop the Authorization header on the way to another origin).
                response = self._http.request(method, leader, **kwargs)
        except httpx.HTTPError as exc:
            raise ClientError(f"cannot reach the overlord at {self.url}: {exc}") from None
        if response.status_code >= 400:
            raise ClientError(_error_message(response), response.status_code)
        return response.json()

    def text(self, path: str, **kwargs: Any) -> str:
        """A plain-text answer (a task's log); :class:`ClientError` as :meth:`request`."""
        try:
            response = self._http.get(path, **kwargs)
        except httpx.HTTPError as exc:
            raise ClientError(f"cannot reach the overlord at {self.url}: {exc}") from None
        if response.status_code >= 400:
            raise ClientError(_error_message(response), response.status_code)
        return response.text

    def sql(self, query: str) -> list[dict[str, Any]]:
        """Run a Druid SQL query (``POST /druid/v2/sql``); its rows as objects, columns in order."""
        return list(self.request("POST", f"{self.url}/druid/v2/sql", json={"query": query}, timeout=None))


def _credentials() -> httpx.Auth | None:
    """Credentials from the environment: ``OVERLORD_TOKEN``, or ``OVERLORD_USER`` and ``OVERLORD_PASSWORD``."""
    token = os.environ.get("OVERLORD_TOKEN")
    if token:
        return _Bearer(token)
    user = os.environ.get("OVERLORD_USER")
    return httpx.BasicAuth(user, os.environ.get("OVERLORD_PASSWORD", "")) if user else None


class _Bearer(httpx.Auth):
    def __init__(self, token: str) -> None:
        self.token = token

    def auth_flow(self, request: httpx.Request) -> Any:
        request.headers["Authorization"] = f"Bearer {self.token}"
        yield request


def _error_message(response: httpx.Response) -> str:
    head = f"the overlord answered HTTP {response.status_code}"
    if response.status_code == 401:
        head += " (set OVERLORD_USER and OVERLORD_PASSWORD, or OVERLORD_TOKEN)"
    try:
        body = response.json()
    except ValueError:
        return f"{head}: {response.text[:500]}"
    if not isinstance(body, dict):
        return f"{head}: {body}"
    errors = body.get("errors") or []
    if errors:
        return f"{head}:\n" + "\n".join(f"  {e.get('path')}: {e.get('message')}" for e in errors)
    return f"{head}: {body.get('errorMessage', body)}"


def table(rows: list[list[str]]) -> str:
    """Rows (the first is the header) as plain-text columns."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def format_rows(rows: list[dict[str, Any]]) -> str:
    """Query rows as a plain-text table, then the row count."""
    if not rows:
        return "(0 rows)"
    cells = [[str(c) for c in rows[0]], *([("" if v is None else str(v)) for v in r.values()] for r in rows)]
    return table(cells) + f"\n({len(rows)} row{'s' if len(rows) != 1 else ''})"


def _offsets(offsets: dict[str, int]) -> str:
    return ", ".join(f"{p}:{o}" for p, o in offsets.items())


def format_status(status: dict[str, Any]) -> str:
    """A supervisor's status for people: state, lag per partition, active tasks, counters, errors."""
    p = status["payload"]
    c = p["counters"]
    lines = [
        f"supervisor {status['id']}: {p['state']} ({p['detailedState']}), "
        f"{'healthy' if p['healthy'] else 'UNHEALTHY'}{', suspended' if p['suspended'] else ''}",
        f"datasource {p['dataSource']} from topic {p['stream']} ({p['partitions']} partitions), "
        f"taskCount {p['taskCount']}, replicas {p['replicas']}",
        f"aggregate lag {p['aggregateLag']}" + (f" (oldest waiting {p['maxLagMillis'] / 1000:.1f} s)"
                                                if p.get("maxLagMillis") else ""),
    ]
    waited = p.get("minimumLagMillis", {})
    rows = [["partition", "committed", "latest", "lag", "waiting s"]]
    rows += [[part, str(p["committedOffsets"].get(part, "-")), str(latest), str(p["minimumLag"].get(part, "-")),
              f"{waited.get(part, 0) / 1000:.1f}"] for part, latest in p["latestOffsets"].items()]
    lines.append(table(rows) if len(rows) > 1 else "no partitions seen yet")
    lines.append(f"active tasks: {len(p['activeTasks']) or 'none'}")
    lines += [f"  {t['id']}  {_offsets(t['startingOffsets'])} -> {_offsets(t['endOffsets'])}  "
              f"running {t['runningSeconds']:.1f} s" for t in p["activeTasks"]]
    lines.append(f"processed {c['processed']}, unparseable {c['unparseable']}, thrown away {c['thrownAway']} "
                 f"({c['processedPerSecond']['1m']}/s over 1 min)")
    if p["recentErrors"]:
        lines.append("recent errors:")
        for e in p["recentErrors"]:
            repeated = f" ({e['count']} times since {e['firstTimestamp']})" if e.get("count", 1) > 1 else ""
            lines.append(f"  {e['timestamp']}  {e['message']}{repeated}")
    return "\n".join(lines)


Output = tuple[str, Any]
"""What a command prints: text for people, and the data ``--json`` prints instead."""
Command = Callable[[OverlordClient, argparse.Namespace], Output]


def run_command(command: Command) -> Callable[[argparse.Namespace], int]:
    """``command`` as an argparse ``func``: prints its text (or ``--json``), maps refusals to exit codes."""
    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        try:
            text, data = command(OverlordClient(args.url), args)
        except ClientError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return exc.exit_code
        print(json.dumps(data, indent=2) if args.json else text)
        return 0

    return run


def _submit(client: OverlordClient, args: argparse.Namespace) -> Output:
    try:
        raw = Path(args.file).read_bytes()
    except OSError as exc:
        raise ClientError(f"cannot read {args.file}: {exc.strerror}") from None
    answer = client.request("POST", "/supervisor", content=raw, headers={"Content-Type": "application/json"})
    ignored = answer.get("ignoredFields") or []
    return (f"supervisor {answer['id']} submitted" + (f"; without effect: {', '.join(ignored)}" if ignored else ""),
            answer)


def _list(client: OverlordClient, _args: argparse.Namespace) -> Output:
    entries = client.request("GET", "/supervisor", params={"state": "true"})
    rows = [["id", "state", "detailed state", "healthy", "suspended"]]
    rows += [[e["id"], e["state"], e["detailedState"], "yes" if e["healthy"] else "NO",
              "yes" if e["suspended"] else "no"] for e in entries]
    return table(rows) if entries else "no supervisors", entries


def _path(supervisor_id: str, tail: str = "") -> str:
    return f"/supervisor/{quote(supervisor_id, safe='')}{tail}"


def _status(client: OverlordClient, args: argparse.Namespace) -> Output:
    if not args.watch:
        status = client.request("GET", _path(args.id, "/status"))
        return format_status(status), status
    try:
        while True:  # a live view: redraw every --every seconds until Ctrl-C (with --json: one line each time)
            status = client.request("GET", _path(args.id, "/status"))
            print(json.dumps(status) if args.json else f"\x1b[H\x1b[2J{time.strftime('%H:%M:%S')}  "
                  f"(every {args.every:g} s; Ctrl-C stops)\n{format_status(status)}", flush=True)
            time.sleep(args.every)
    except KeyboardInterrupt:
        return "", None


def _history(client: OverlordClient, args: argparse.Namespace) -> Output:
    rows = [["version", "topic", "taskCount", "state"]]
    history = client.request("GET", _path(args.id, "/history"))
    for entry in history:
        io = entry["spec"].get("spec", {}).get("ioConfig", {})
        state = "terminated" if entry["terminated"] else ("suspended" if entry["suspended"] else "running")
        rows.append([entry["version"], str(io.get("topic", "")), str(io.get("taskCount", "")), state])
    return table(rows) if len(rows) > 1 else f"no history for {args.id}", history


def _stats(client: OverlordClient, args: argparse.Namespace) -> Output:
    answer = client.request("GET", _path(args.id, "/stats"))
    [(_group, by_id)] = answer.items()
    stats = by_id[args.id]
    totals, rates = stats["totals"]["buildSegments"], stats["movingAverages"]["buildSegments"]
    rows = [["", "processed", "unparseable", "thrown away"],
            ["total", *(str(totals[k]) for k in ("processed", "unparseable", "thrownAway"))]]
    return table(rows) + "\n" + "records/s: " + ", ".join(
        f"{window} {rate['processed']:g}" for window, rate in rates.items()), answer


def _tasks(client: OverlordClient, args: argparse.Namespace) -> Output:
    params = {k: v for k, v in (("datasource", args.datasource), ("state", args.state), ("max", args.max)) if v}
    tasks = client.request("GET", "/tasks", params=params)
    rows = [["task", "type", "datasource", "status", "seconds", "detail"]]
    rows += [[t["id"], t["type"], t["dataSource"], t["status"],
              "running" if t["duration"] < 0 else f"{t['duration'] / 1000:.1f}", (t.get("statusDetail") or "")[:80]]
             for t in tasks]
    return table(rows) if len(rows) > 1 else "no tasks", tasks


@contextmanager
def _compaction_progress(client: OverlordClient, datasource: str, every_s: float = 1.0) -> Iterator[None]:
    """On a terminal, while the ``with`` body waits for a compaction: its time so far and its task's latest log line.

    Scripts (stderr not a terminal) see nothing: stderr carries only errors there.
    """
    if not sys.stderr.isatty():
        yield
        return
    started, stop = time.monotonic(), threading.Event()

    def show(line: str) -> None:
        sys.stderr.write(f"\r\x1b[Kcompacting {datasource}: {time.monotonic() - started:.0f} s  {line}"[:200])
        sys.stderr.flush()

    def follow() -> None:
        show("starting")
        while not stop.wait(every_s):
            try:
                running = [t for t in client.request("GET", "/tasks", params={"datasource": datasource,
                                                                             "state": "running"})
                           if t["type"] == "compact"]
                log = client.text(f"/task/{quote(running[0]['id'], safe='')}/log", params={"offset": -2000}
                                  ) if running else ""
            except ClientError:
                continue
            show((log.strip().splitlines() or ["waiting for its task"])[-1])

    thread = threading.Thread(target=follow, name="compaction-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        sys.stderr.write("\r\x1b[K")


def _reset_offsets(client: OverlordClient, args: argparse.Namespace) -> Output:
    topic, offsets = client.request("GET", _path(args.id, "/status"))["payload"]["stream"], dict(args.offsets)
    body = {"type": "kafka", "partitions": {"type": "end", "stream": topic, "partitionOffsetMap": offsets}}
    answer = client.request("POST", _path(args.id, "/resetOffsets"), json=body)
    return f"supervisor {args.id}: committed offsets of topic {topic} set to {_offsets(offsets)}", {
        **answer, "partitionOffsetMap": offsets}


def _compact(client: OverlordClient, args: argparse.Namespace) -> Output:
    body = {k: v for k, v in (("interval", args.interval), ("maxRowsPerSegment", args.max_rows_per_segment)) if v}
    with _compaction_progress(client, args.id):
        answer = client.request("POST", f"/compact/{quote(args.id, safe='')}", json=body, timeout=None)
    rows = [["interval", "segments", "rows", "status"]]
    rows += [[i["interval"], f"{i['inputSegments']} -> {i['outputSegments']}", f"{i['inputRows']} -> {i['outputRows']}",
              i["status"]] for i in answer["intervals"]]
    return f"compaction task {answer['task']}:\n" + (table(rows) if len(rows) > 1 else "nothing to compact"), answer


_PARTITION = re.compile(r"(?:[A-Za-z0-9._-]{1,249}:)?[0-9]+")
"""A partition number, or ``topic:number`` for a topicPattern's."""


def _partition_offset(text: str) -> tuple[str, int]:
    partition, sep, offset = text.rpartition("=")
    if not sep or not _PARTITION.fullmatch(partition) or not offset.isdigit():
        raise argparse.ArgumentTypeError(
            f"expected PARTITION=OFFSET (a topicPattern's partition as TOPIC:PARTITION), e.g. 0=1500 or "
            f"clicks:0=1500; got {text!r}")
    return partition, int(offset)


def _action(action: str, done: str) -> Command:
    def act(client: OverlordClient, args: argparse.Namespace) -> Output:
        return f"supervisor {args.id} {done}", client.request("POST", _path(args.id, f"/{action}"))

    return act


def _action_on_all(action: str, done: str) -> Command:
    def act(client: OverlordClient, _args: argparse.Namespace) -> Output:
        return f"every supervisor {done}", client.request("POST", f"/supervisor/{action}")

    return act


def _cmd_serve(args: argparse.Namespace) -> int:
    from overlord.config import Settings
    from overlord.http.server import serve

    return serve(Settings.from_env(), args.host, args.port, args.shutdown_grace, insecure_open=args.insecure_open,
                 ssl=(args.ssl_certfile, args.ssl_keyfile) if args.ssl_certfile else None)


def _cmd_hash_password(_args: argparse.Namespace) -> int:
    from overlord.http.auth import hash_password

    password = getpass.getpass("password: ") if sys.stdin.isatty() else sys.stdin.readline().rstrip("\n")
    if not password:
        print("no password given", file=sys.stderr)
        return 2
    print(hash_password(password))
    return 0


def _cmd_new_token(args: argparse.Namespace) -> int:
    from overlord.http.auth import new_token

    token, digest = new_token()
    if args.json:
        print(json.dumps({"token": token, "tokenSha256": digest}))
        return 0
    print(f"token (give it to the client, e.g. OVERLORD_TOKEN):  {token}")
    print(f"tokenSha256 (put it in OVERLORD_AUTH_FILE):            {digest}")
    return 0


def common_options() -> argparse.ArgumentParser:
    """``--url`` and ``--json``, shared by every command that talks to a running overlord."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=os.environ.get("OVERLORD_URL", DEFAULT_URL),
                        help=f"overlord base URL (default: $OVERLORD_URL or {DEFAULT_URL})")
    common.add_argument("--json", action="store_true", help="print the overlord's answer as JSON")
    return common


def add_commands(sub: Any) -> None:
    """Register ``serve`` and ``supervisor ...`` on the ``overlord`` command's subparsers."""
    serve = sub.add_parser("serve", help="run the overlord: supervisors, the HTTP API, the console and metrics")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    serve.add_argument("--port", type=int, default=8090, help="port to listen on (default: %(default)s)")
    serve.add_argument("--shutdown-grace", type=float, default=30.0, metavar="SECONDS",
                       help="on SIGINT/SIGTERM, how long running tasks may take to publish before they are "
                            "stopped unpublished (default: %(default)s)")
    serve.add_argument("--ssl-certfile", help="serve HTTPS with this PEM certificate (chain)")
    serve.add_argument("--ssl-keyfile", help="the certificate's PEM private key")
    serve.add_argument("--insecure-open", action="store_true",
                       help="run without authentication when OVERLORD_AUTH_FILE is not set (development only)")
    serve.set_defaults(func=_cmd_serve)

    auth = sub.add_parser("auth", help="make entries for OVERLORD_AUTH_FILE").add_subparsers(
        dest="auth_command", required=True)
    auth.add_parser("hash-password", help="print the argon2 hash of a password (read from the terminal or "
                                          "stdin) for a user's passwordHash").set_defaults(func=_cmd_hash_password)
    token = auth.add_parser("new-token", help="print a new bearer token and its tokenSha256")
    token.add_argument("--json", action="store_true", help='print {"token", "tokenSha256"} as JSON')
    token.set_defaults(func=_cmd_new_token)

    common = common_options()
    supervisor = sub.add_parser("supervisor", help="manage supervisors of a running overlord over HTTP")
    commands = supervisor.add_subparsers(dest="supervisor_command", required=True)
    submit = commands.add_parser("submit", parents=[common], help="create or update a supervisor from a spec file")
    submit.add_argument("file", help="supervisor spec JSON (Druid's Kafka supervisor format)")
    submit.set_defaults(func=run_command(_submit))
    commands.add_parser("list", parents=[common], help="supervisors and their state").set_defaults(
        func=run_command(_list))
    verbs = {
        "status": ("state, lag per partition, active tasks (--watch: a live view)", _status),
        "history": ("the supervisor's spec versions, newest first", _history),
        "stats": ("processed, unparseable and thrown-away records; 1, 5 and 15-minute rates", _stats),
        "reset-offsets": ("set some partitions' committed offsets (PARTITION=OFFSET ...)", _reset_offsets),
        "compact": ("compact the datasource's intervals now, as a task of the overlord", _compact),
        "suspend": ("stop launching tasks", _action("suspend", "suspended")),
        "resume": ("launch tasks again", _action("resume", "resumed")),
        "reset": ("forget committed offsets (restart from earliest/latest)", _action("reset", "reset")),
        "terminate": ("stop the supervisor for good", _action("terminate", "terminated")),
    }
    parsers = {}
    for name, (help_text, command) in verbs.items():
        parsers[name] = parser = commands.add_parser(name, parents=[common], help=help_text)
        parser.add_argument("id", help="supervisor id (the datasource name)")
        parser.set_defaults(func=run_command(command))
    parsers["status"].add_argument("--watch", action="store_true", help="redraw until Ctrl-C")
    parsers["status"].add_argument("--every", type=float, default=2.0, metavar="SECONDS",
                                   help="--watch's refresh interval (default: %(default)s)")
    parsers["reset-offsets"].add_argument("offsets", nargs="+", type=_partition_offset, metavar="PARTITION=OFFSET",
                                          help="the next offset to read of each partition (TOPIC:PARTITION=OFFSET "
                                               "for a topicPattern's); it must lie within what the topic holds")
    for name, (action, done) in {"suspend-all": ("suspendAll", "suspended"), "resume-all": ("resumeAll", "resumed"),
                                 "terminate-all": ("terminateAll", "terminated")}.items():
        commands.add_parser(name, parents=[common], help=f"Druid's {action}: every supervisor {done}").set_defaults(
            func=run_command(_action_on_all(action, done)))
    parsers["compact"].add_argument("--interval", help="START/END (ISO-8601): only intervals inside it")
    parsers["compact"].add_argument("--max-rows-per-segment", type=int, help="default: the spec's")
    tasks = commands.add_parser("tasks", parents=[common], help="tasks, newest first")
    tasks.add_argument("--datasource", help="only this datasource's tasks")
    tasks.add_argument("--state", choices=["running", "complete", "success", "failed"], help="only tasks in this state")
    tasks.add_argument("--max", type=int, default=50, help="at most this many (default: %(default)s)")
    tasks.set_defaults(func=run_command(_tasks))
