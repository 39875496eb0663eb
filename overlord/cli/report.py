"""Human-readable summaries of what a task did."""

from __future__ import annotations

from indexing_task.task import TaskReport

__all__ = ["format_report"]


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
