"""The compaction swap: one transaction that replaces an interval's segments with compacted ones.

Compaction reads an interval's visible set (version ``v``) without any lock, writes new files,
and then calls :func:`swap_compacted`, which takes the same per-datasource lock as the publish
transaction (the ``datasource_offsets`` row, ``SELECT ... FOR UPDATE``) and in one transaction:

1. checks that the interval's current version is still ``v`` and that every segment it read
   is still used at ``v`` (otherwise another compaction swapped first: *retryable*, i.e. run
   the compaction again on the new visible set; this attempt's files are orphans);
2. inserts the new segments at ``v + 1``, used;
3. marks the segments it read unused (``used_status_updated_at = now()``);
4. carries over every other segment used at ``v``: left out of the merge, or appended after the
   read (metadata only: new version ``v + 1`` and a fresh partition number after the new
   segments; the file stays). The new segments record whether they hold the whole interval
   (``compacted_by.whole_interval``: nothing was carried over).

Publishes append at the interval's highest version and hold the same lock, so each appended
segment either committed before the swap took the lock (and is carried over) or commits after
it (and lands at ``v + 1``): no appended row is ever hidden or counted twice. No lock is held
while compaction computes. Outcomes are values; only infrastructure faults and bugs raise.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import psycopg.errors
import sqlalchemy as sa

from segment_store.deep_storage import DeepStorage
from segment_store.descriptors import SegmentDescriptor
from segment_store.records import lock_offsets_row
from segment_store.schema import segments as segments_t

__all__ = ["CompactionSwap", "SwapOutcome", "swap_compacted"]

SwapStatus = Literal["ok", "retryable", "fatal"]

logger = logging.getLogger(__name__)

@dataclass(frozen=True)
class CompactionSwap:
    """What a finished compaction of one exact interval asks to commit."""

    datasource: str
    interval_start: datetime
    interval_end: datetime
    input_version: int
    """The version of the visible set the compaction read."""
    input_ids: frozenset[str]
    """Exactly the segments it read (all at ``input_version``)."""
    segments: tuple[SegmentDescriptor, ...]
    """The compacted files, to become version ``input_version + 1``."""
    job_id: str

    def __post_init__(self) -> None:
        who = f"compaction {self.job_id} of datasource {self.datasource!r}"
        object.__setattr__(self, "input_ids", frozenset(self.input_ids))
        object.__setattr__(self, "segments", tuple(self.segments))
        if self.interval_start.tzinfo is None or self.interval_end.tzinfo is None:
            raise ValueError(f"{who}: interval must be UTC-aware")
        if not self.input_ids:
            raise ValueError(f"{who}: expected at least one input segment, found none")
        for seg in self.segments:
            if (seg.datasource, seg.interval_start, seg.interval_end) != (
                    self.datasource, self.interval_start, self.interval_end):
                raise ValueError(f"{who}: segment {seg.id} is not in {self.interval_label}")
        if len({seg.id for seg in self.segments}) != len(self.segments):
            raise ValueError(f"{who}: duplicate segment ids")

    @property
    def interval_label(self) -> str:
        return f"{self.interval_start.isoformat()}/{self.interval_end.isoformat()}"


@dataclass(frozen=True)
class SwapOutcome:
    """``version`` is the interval's new version (ok) or None; ids are what the swap changed."""

    status: SwapStatus
    message: str
    version: int | None = None
    replaced: tuple[str, ...] = ()
    carried_over: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _check(swap: CompactionSwap, rows: Sequence[Any]) -> tuple[SwapOutcome | None, list[str]]:
    """Compare the interval as locked with what compaction read; return (rejection, appended ids)."""
    where = f"datasource {swap.datasource!r} interval {swap.interval_label}"
    current = max((r.version for r in rows), default=None)
    if current != swap.input_version:
        return SwapOutcome("retryable", f"{where}: expected version {swap.input_version}, found {current} "
                           "(another compaction swapped first)"), []
    used_at = {r.id: r.partition_num for r in rows if r.used and r.version == swap.input_version}
    gone = sorted(swap.input_ids - used_at.keys())
    if gone:
        return SwapOutcome("retryable", f"{where}: expected the {len(swap.input_ids)} segments read to be "
                           f"used at version {swap.input_version}, found {len(gone)} no longer used "
                           f"(first: {gone[0]})"), []
    appended = sorted(used_at.keys() - swap.input_ids, key=lambda i: used_at[i])
    return None, appended


def _swap_in(conn: sa.Connection, swap: CompactionSwap, storage: DeepStorage | None) -> SwapOutcome:
    lock_offsets_row(conn, swap.datasource, topic=None)  # the publish transaction's lock
    missing = storage.missing(seg.path for seg in swap.segments) if storage is not None else []
    if missing:  # swept as orphans by cleanup before the swap took the lock: compact again
        return SwapOutcome("retryable", f"datasource {swap.datasource!r} interval {swap.interval_label}: "
                           f"compacted files missing (removed by cleanup?): {', '.join(missing[:3])}")
    s = segments_t.c
    rows = conn.execute(sa.select(s.id, s.version, s.partition_num, s.used).where(
        (s.datasource == swap.datasource) & (s.interval_start == swap.interval_start)
        & (s.interval_end == swap.interval_end))).all()
    rejected, appended = _check(swap, rows)
    if rejected is not None:
        return rejected
    version = swap.input_version + 1
    compacted_by = {"job_id": swap.job_id, "input_version": swap.input_version,
                    "input_segments": len(swap.input_ids), "whole_interval": not appended}
    if swap.segments:
        conn.execute(segments_t.insert(), [
            {"id": seg.id, "datasource": seg.datasource, "interval_start": seg.interval_start,
             "interval_end": seg.interval_end, "version": version, "partition_num": n, "path": seg.path,
             "size_bytes": seg.size_bytes, "num_rows": seg.num_rows, "used": True,
             "descriptor": {**seg.details, "compacted_by": compacted_by}}
            for n, seg in enumerate(swap.segments)])
    conn.execute(segments_t.update().where(s.id.in_(sorted(swap.input_ids)))
                 .values(used=False, used_status_updated_at=sa.func.now()))
    if appended:
        conn.execute(segments_t.update().where(s.id == sa.bindparam("seg_id"))
                     .values(version=version, partition_num=sa.bindparam("new_partition")),
                     [{"seg_id": seg_id, "new_partition": len(swap.segments) + n}
                      for n, seg_id in enumerate(appended)])
    message = (f"datasource {swap.datasource!r} interval {swap.interval_label}: version {swap.input_version} -> "
               f"{version}: {len(swap.segments)} new segment(s), {len(swap.input_ids)} replaced, "
               f"{len(appended)} other(s) carried over")
    return SwapOutcome("ok", message, version, tuple(sorted(swap.input_ids)), tuple(appended))


def swap_compacted(engine: sa.Engine, swap: CompactionSwap, storage: DeepStorage | None = None) -> SwapOutcome:
    """Swap the compacted segments in for the ones compaction read, atomically, or change nothing.

    With ``storage``, the compacted files must still exist once the lock is held (see cleanup).

    Blocks while a publish (or another swap, or a reset) of the same datasource holds its lock.
    """
    with engine.connect().execution_options(isolation_level="READ COMMITTED") as conn:
        with conn.begin() as tx:
            try:
                outcome = _swap_in(conn, swap, storage)
            except sa.exc.IntegrityError as exc:
                if not isinstance(exc.orig, psycopg.errors.UniqueViolation):
                    raise
                tx.rollback()
                outcome = SwapOutcome("fatal", f"datasource {swap.datasource!r} interval {swap.interval_label}: "
                                      f"compacted segment already exists ({exc.orig.diag.message_detail or exc.orig})")
            else:
                if not outcome.ok:
                    tx.rollback()
    log = logger.info if outcome.status != "fatal" else logger.warning
    log("compaction swap %s: datasource=%s job=%s interval=%s: %s", outcome.status, swap.datasource,
        swap.job_id, swap.interval_label, outcome.message)
    return outcome
