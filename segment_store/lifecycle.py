"""Dropping segments (marking them unused) and restoring them, under the lock publishes take.

Both run in one transaction holding the datasource's lock (the ``datasource_offsets`` row, as
the publish transaction and the compaction swap do), so a publish into a dropped interval either
committed first (its segments are dropped with the rest) or commits after (they stay visible),
and a compaction that read dropped segments finds them gone at its swap and replaces nothing.
Segments are chosen by ids, or by an interval that holds theirs (Druid's ``markUnused`` and
``markUsed``), or all of the datasource's. Restoring by interval marks used, per exact
interval, the unused segments at that interval's newest version: the ones a compaction replaced
are older and stay unused (Druid restores only segments no other overshadows). Dropped rows
and their files stay until cleanup deletes them (see :mod:`segment_store.cleanup`).
"""

from __future__ import annotations

import logging
from collections.abc import Collection

import sqlalchemy as sa

from segment_store.schema import datasource_offsets as offsets_t
from segment_store.schema import segments as segments_t
from segment_store.timeline import Interval

__all__ = ["mark_unused", "mark_used"]

logger = logging.getLogger(__name__)


def _chosen(datasource: str, interval: Interval | None, segment_ids: Collection[str] | None) -> sa.ColumnElement[bool]:
    s = segments_t.c
    where = s.datasource == datasource
    if interval is not None:
        where &= (s.interval_start >= interval[0]) & (s.interval_end <= interval[1])
    if segment_ids is not None:
        where &= s.id.in_(sorted(segment_ids))
    return where


def _mark(engine: sa.Engine, datasource: str, used: bool, where: sa.ColumnElement[bool]) -> list[str]:
    s = segments_t.c
    with engine.begin() as conn:
        locked = conn.execute(sa.select(offsets_t.c.datasource).where(offsets_t.c.datasource == datasource)
                              .with_for_update()).one_or_none()
        if locked is None:  # nothing was ever published to it
            return []
        changed = conn.execute(segments_t.update().where(where & (s.used != used))
                               .values(used=used, used_status_updated_at=sa.func.now()).returning(s.id))
        ids = sorted(changed.scalars())
    logger.info("datasource %s: %d segment(s) marked %s", datasource, len(ids), "used" if used else "unused")
    return ids


def mark_unused(engine: sa.Engine, datasource: str, *, interval: Interval | None = None,
                segment_ids: Collection[str] | None = None) -> list[str]:
    """Drop used segments: those within ``interval`` and among ``segment_ids`` (all when both are None).

    Returns the ids of those it dropped.
    """
    return _mark(engine, datasource, False, _chosen(datasource, interval, segment_ids))


def mark_used(engine: sa.Engine, datasource: str, *, interval: Interval | None = None,
              segment_ids: Collection[str] | None = None) -> list[str]:
    """Restore unused segments: ``segment_ids``, or else the newest version's within ``interval`` (or all).

    Returns the ids of those it restored.
    """
    where = _chosen(datasource, interval, segment_ids)
    if segment_ids is None:
        s, other = segments_t.c, segments_t.alias("other").c
        newest = sa.select(sa.func.max(other.version)).where(
            (other.datasource == s.datasource) & (other.interval_start == s.interval_start)
            & (other.interval_end == s.interval_end)).scalar_subquery()
        where &= s.version == newest
    return _mark(engine, datasource, True, where)
