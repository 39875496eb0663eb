"""What the local commands print: a task's summary for people, and any report as JSON (``--json``)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from indexing_task.task import TaskReport

__all__ = ["as_json", "format_report"]


def format_report(report: TaskReport) -> str:
    """What a task read, kept, threw away and published, with a few bad records, as lines of text."""
    seconds = report.index_seconds or 1e-9
    lines = [
        f"task {report.task_id} ({report.datasource}): publish {report.outcome.status.upper()}"
        + (f" - {report.outcome.message}" if report.outcome.message else ""),
        f"  records read   {report.records:>12,}  ({report.records / seconds:,.0f}/s over {seconds:.1f}s)",
        f"  processed      {report.processed:>12,}",
        f"  unparseable    {report.unparseable:>12,}",
        f"  thrown away    {report.thrown_away:>12,}",
        f"  rows out       {report.rows_out:>12,}  (after rollup)",
        f"  segments       {len(report.segments):>12,}  (publish took {report.publish_seconds * 1000:.0f} ms)",
        "  offsets        " + ", ".join(
            f"p{p}: {report.start_offsets[p]}->{report.end_offsets[p]}" for p in sorted(report.start_offsets)),
    ]
    for sample in report.bad_samples[:5]:
        lines.append(f"  bad record     p{sample['partition']}@{sample['offset']}: {sample['reason']}: "
                     f"{sample['value'][:80]!r}")
    return "\n".join(lines)


def as_json(value: Any) -> str:
    """``value`` (reports, records, mappings of them) as indented JSON for ``--json``."""
    return json.dumps(_plain(value), indent=2)


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    return value if value is None or isinstance(value, bool | int | float | str) else str(value)
