"""The status page at ``/``, rendered from status payloads.

It takes the (already masked) ``status_payload`` dicts of the running supervisors, so they
show exactly what ``GET /druid/indexer/v1/supervisor/{id}/status`` shows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from html import escape
from typing import Any

__all__ = ["render_dashboard"]

REFRESH_SECONDS = 5

_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: .4em 0 1em; }
th, td { border: 1px solid #ccc; padding: .2em .6em; text-align: left; vertical-align: top; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.ok { color: #161; } .bad { color: #b11; font-weight: bold; } .muted { color: #777; }
section { border-top: 2px solid #ddd; margin-top: 1.2em; }
"""


def _table(headers: Sequence[str], rows: Iterable[Sequence[object]], numeric: frozenset[int] = frozenset()) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f'<td class="n">{escape(str(c))}</td>' if i in numeric else f"<td>{escape(str(c))}</td>"
                         for i, c in enumerate(row)) + "</tr>"
        for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>" if body else '<p class="muted">none</p>'


def _offsets(offsets: Mapping[str, int]) -> str:
    return ", ".join(f"{p}:{o}" for p, o in offsets.items())


def _health(p: Mapping[str, Any]) -> str:
    css = "ok" if p["healthy"] else "bad"
    return f'<span class="{css}">{escape(p["state"])}</span> <span class="muted">({escape(p["detailedState"])})</span>'


def _section(status: Mapping[str, Any]) -> str:
    p, sid = status["payload"], status["id"]
    c = p["counters"]
    partitions = [(part, p["committedOffsets"].get(part, "-"), latest, p["minimumLag"].get(part, "-"))
                  for part, latest in p["latestOffsets"].items()]
    active = [(t["id"], _offsets(t["startingOffsets"]), _offsets(t["endOffsets"]), t["runningSeconds"])
              for t in p["activeTasks"]]
    recent = [(t["id"], t["status"], t.get("statusDetail", ""), t.get("durationSeconds", "")) for t in p["recentTasks"]]
    errors = [(e["timestamp"], e["message"]) for e in p["recentErrors"]]
    return (
        f'<section id="{escape(sid)}"><h2>{escape(sid)} {_health(p)}</h2>'
        f"<p>datasource <b>{escape(p['dataSource'])}</b> from topic <b>{escape(p['stream'])}</b>; "
        f"taskCount {p['taskCount']}, replicas {p['replicas']}; aggregate lag <b>{p['aggregateLag']}</b>; "
        f"processed {c['processed']}, unparseable {c['unparseable']}, thrown away {c['thrownAway']}, "
        f"{c['processedPerSecond']['1m']}/s over 1 min; offsets updated {escape(str(p['offsetsLastUpdated']))}</p>"
        "<h3>Partitions</h3>" + _table(("partition", "committed", "latest", "lag"), partitions, frozenset({1, 2, 3}))
        + "<h3>Active tasks</h3>" + _table(("task", "start", "end", "running s"), active, frozenset({3}))
        + "<h3>Recent tasks</h3>" + _table(("task", "status", "detail", "duration s"), recent, frozenset({3}))
        + "<h3>Recent errors</h3>" + _table(("time", "message"), errors)
        + "</section>")


def render_dashboard(statuses: Sequence[Mapping[str, Any]], now: datetime | None = None) -> str:
    """One self-refreshing HTML page: a summary row per supervisor, then a section each."""
    now = now or datetime.now(UTC)
    summary = "".join(
        f'<tr><td><a href="#{escape(s["id"])}">{escape(s["id"])}</a></td><td>{_health(s["payload"])}</td>'
        f'<td class="n">{s["payload"]["aggregateLag"]}</td><td class="n">{len(s["payload"]["activeTasks"])}</td>'
        f'<td>{"yes" if s["payload"]["suspended"] else "no"}</td></tr>'
        for s in statuses)
    overview = ("<table><tr><th>supervisor</th><th>state</th><th>lag</th><th>active tasks</th><th>suspended</th></tr>"
                f"{summary}</table>") if statuses else '<p class="muted">no supervisors</p>'
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><meta http-equiv="refresh" content="{REFRESH_SECONDS}">'
        f"<title>overlord</title><style>{_STYLE}</style></head><body>"
        f'<h1>overlord</h1><p class="muted">{now:%Y-%m-%d %H:%M:%S} UTC, refreshes every {REFRESH_SECONDS} s; '
        '<a href="/metrics">metrics</a>, <a href="/docs">API</a></p>'
        + overview + "".join(_section(s) for s in statuses) + "</body></html>")
