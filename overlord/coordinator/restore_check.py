"""What an operator checks after restoring the metadata store, before any overlord leads again.

``overlord verify`` (docs/operations.md, "Backup and restore") answers three questions:

1. **Is an overlord running?** One that leads holds the leader lock; the restore must happen with
   every overlord stopped (their in-flight tasks were planned against the state the restore undid).
2. **Does every used segment find its files?** A row whose file is missing or of another size
   than the row says cannot be read; the check names it, its interval, and the task that
   published it with that task's offset ranges (kept in the row's descriptor). With the kill duty's backup window
   (``OVERLORD_KILL_BACKUP_WINDOW_S``) longer than the backup's age, there are none.
3. **Does the topic still hold what the supervisors will read again?** A supervisor resumes from
   the restored offsets; records published after the backup are indexed again from the topic. A
   partition whose committed offset is below the topic's earliest has lost those records for good:
   the check names the partition and the offsets gone. One above the topic's end means the topic
   was recreated.

Files without rows (publishes after the backup) are counted: the kill duty deletes them as orphans.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from indexing_task.watermarks import stream_watermarks
from overlord.config import Settings
from overlord.coordinator.table_export import TableExport
from overlord.supervisor.metadata_store import MetadataStore
from overlord.supervisor.task_ranges import consumer_properties
from segment_store import DeepStorage
from segment_store.cleanup import cleanup
from segment_store.leadership import LEADER_LOCK_KEY
from segment_store.records import committed_offsets
from segment_store.schema import segments as segments_t
from specs import SupervisorSpec, load_supervisor_spec

__all__ = ["MissingSegment", "RestoreReport", "check_restore"]


@dataclass(frozen=True)
class MissingSegment:
    """A used segment whose file is missing or not the size its row says."""

    datasource: str
    id: str
    interval: str
    path: str
    problem: str
    published_by: str | None
    """The task that published it (None: a compaction's output)."""
    offsets: Mapping[str, Any] | None
    """The publishing task's ``{"start": ..., "end": ...}`` offsets by partition."""


@dataclass
class RestoreReport:
    """The outcome of :func:`check_restore`; ``consistent`` when nothing needs the operator."""

    overlord_running: bool = False
    used_segments: int = 0
    missing: list[MissingSegment] = field(default_factory=list)
    lost_records: list[str] = field(default_factory=list)
    """Partitions whose committed offset the topic no longer holds (or that are past its end), said plainly."""
    unreachable: list[str] = field(default_factory=list)
    """Datasources whose topic could not be asked."""
    orphan_files: int = 0

    @property
    def consistent(self) -> bool:
        return not (self.overlord_running or self.missing or self.lost_records or self.unreachable)


def check_restore(settings: Settings, engine: sa.Engine, *, timeout_s: float = 10.0) -> RestoreReport:
    """Check a restored metadata store against deep storage and the topics (writes nothing)."""
    report = RestoreReport()
    with engine.connect() as conn:
        report.overlord_running = bool(conn.execute(sa.text(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND objid = :key"),
            {"key": LEADER_LOCK_KEY}).scalar())
        rows = conn.execute(sa.select(segments_t).where(segments_t.c.used)).all()
    report.used_segments = len(rows)
    report.missing = _missing(settings, engine, rows)
    storage = DeepStorage(settings.deep_storage)
    report.orphan_files = len(cleanup(engine, storage, orphan_grace=timedelta(0), retention=timedelta(days=36500),
                                      keep=TableExport(settings, engine).protected(), dry_run=True).orphan_files)
    for record in MetadataStore(engine).current_specs():
        if record.terminated:
            continue
        spec = load_supervisor_spec(dict(record.spec))
        _check_topic(settings, engine, spec, report, timeout_s)
    return report


def _missing(settings: Settings, engine: sa.Engine, rows: Sequence[Any]) -> list[MissingSegment]:
    storage = DeepStorage(settings.deep_storage)
    gone = set(storage.missing(row.path for row in rows))
    out = []
    for row in rows:
        size = None if row.path in gone else storage.size(row.path)  # a request per file: fine for a one-off check
        if size == row.size_bytes:
            continue
        problem = "missing" if size is None else f"{size:,} bytes where the row says {row.size_bytes:,}"
        by = (row.descriptor or {}).get("published_by") or {}  # an indexing task's: its topic and offset ranges
        offsets = {"start": by["start_offsets"], "end": by["end_offsets"]} if "end_offsets" in by else None
        out.append(MissingSegment(row.datasource, row.id, f"{row.interval_start.isoformat()}/"
                                  f"{row.interval_end.isoformat()}", row.path, problem, by.get("task_id"), offsets))
    return out


def _check_topic(settings: Settings, engine: sa.Engine, spec: SupervisorSpec, report: RestoreReport,
                 timeout_s: float) -> None:
    datasource = spec.datasource
    stored = committed_offsets(engine, datasource)
    if stored is None or not stored.offsets:
        return
    try:
        marks = stream_watermarks(consumer_properties(spec, settings), spec.spec.io_config, timeout_s=timeout_s)
    except Exception as exc:  # noqa: BLE001 (any failure to ask is reported, not raised)
        report.unreachable.append(f"{datasource}: {type(exc).__name__}: {exc}")
        return
    for partition, committed in sorted(stored.offsets.items(), key=lambda item: str(item[0])):
        low, high = marks.get(partition, (0, 0))
        if committed < low:
            report.lost_records.append(f"{datasource} partition {partition}: offsets {committed} to {low - 1} were "
                                       f"published after the backup and the topic no longer holds them (its "
                                       f"earliest is {low}); those {low - committed:,} records are lost")
        elif committed > high:
            report.lost_records.append(f"{datasource} partition {partition}: the committed offset {committed} is past "
                                       f"the topic's end ({high}): was the topic recreated?")
