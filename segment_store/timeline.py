"""The segment timeline: the only way queries and compaction find the files they may read.

For each (datasource, exact interval) the *visible* segments are the used ones at the highest
version among that interval's used segments; lower versions are overshadowed. Unused rows and
files that no row references (orphans of tasks that never published) are never visible.

Versions are per exact interval (the publish transaction appends at the interval's current
version, compaction swaps in version + 1), so they do not order segments of different
intervals. Overlapping intervals of different granularities (after a spec changed its
``segmentGranularity``) therefore hold different rows and are all visible; Druid's
cross-interval overshadowing would hide rows appended at a fresh interval's version 1 under an
older, coarser interval compacted to version 2. A job that rewrites finer intervals into a
coarser one must mark the finer segments unused in its own swap.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from itertools import groupby
from typing import Any

import sqlalchemy as sa

from segment_store.records import SegmentRecord, segment_record
from segment_store.schema import segments as segments_t

__all__ = ["Interval", "VisibleSet", "datasources", "read_segments", "timeline_mark", "visible", "visible_by_interval",
           "visible_segments", "visible_set", "visible_totals"]

Interval = tuple[datetime, datetime]
"""``[start, end)``, UTC-aware."""

_RECORD_COLUMNS = [segments_t.c[name] for name in SegmentRecord.__dataclass_fields__]


def _check_interval(interval: Interval) -> None:
    start, end = interval
    if start.tzinfo is None or end.tzinfo is None:
        raise ValueError(f"interval {start}/{end} must be UTC-aware")
    if not start < end:
        raise ValueError(f"empty interval: expected start < end, found {start.isoformat()}/{end.isoformat()}")


def read_segments(conn: sa.Connection, datasource: str, interval: Interval | None = None,
                  used_only: bool = True) -> list[SegmentRecord]:
    """Segment rows of ``datasource`` whose interval overlaps ``interval`` (all when None)."""
    s = segments_t.c
    where = s.datasource == datasource
    if used_only:
        where &= s.used
    if interval is not None:
        _check_interval(interval)
        where &= (s.interval_start < interval[1]) & (s.interval_end > interval[0])
    query = sa.select(*_RECORD_COLUMNS).where(where).order_by(
        s.interval_start, s.interval_end, s.version, s.partition_num)
    return [segment_record(row) for row in conn.execute(query).mappings()]


def visible(records: Iterable[SegmentRecord]) -> list[SegmentRecord]:
    """The visible subset of ``records``: used, at the highest used version of their exact interval.

    Ordered by interval start, interval end and partition number.
    """
    used = sorted((r for r in records if r.used),
                  key=lambda r: (r.interval_start, r.interval_end, r.version, r.partition_num))
    out: list[SegmentRecord] = []
    for _, group in groupby(used, key=lambda r: (r.interval_start, r.interval_end)):
        chunk = list(group)
        top = chunk[-1].version
        out.extend(r for r in chunk if r.version == top)
    return out


def visible_by_interval(records: Iterable[SegmentRecord]) -> dict[Interval, list[SegmentRecord]]:
    """The visible subset of ``records`` grouped by exact interval, in time order."""
    out: dict[Interval, list[SegmentRecord]] = {}
    for record in visible(records):
        out.setdefault((record.interval_start, record.interval_end), []).append(record)
    return out


def visible_segments(engine: sa.Engine, datasource: str, interval: Interval | None = None) -> list[SegmentRecord]:
    """The segments a query of ``datasource`` over ``interval`` (everything when None) must read.

    A segment is included when its interval overlaps ``interval``; rows outside ``interval``
    are the reader's to filter.
    """
    with engine.connect() as conn:
        return visible(read_segments(conn, datasource, interval))


def visible_totals(engine: sa.Engine) -> dict[str, tuple[int, int]]:
    """Each datasource's visible segments and their bytes: :func:`visible`'s rule, counted by PostgreSQL."""
    s = segments_t.c
    top = sa.func.max(s.version).over(partition_by=(s.datasource, s.interval_start, s.interval_end))
    used = sa.select(s.datasource, s.version, s.size_bytes, top.label("top")).where(s.used).subquery()
    query = (sa.select(used.c.datasource, sa.func.count(), sa.func.sum(used.c.size_bytes))
             .where(used.c.version == used.c.top).group_by(used.c.datasource))
    with engine.connect() as conn:
        return {ds: (int(n), int(size)) for ds, n, size in conn.execute(query)}


def datasources(engine: sa.Engine) -> list[str]:
    """Datasources that have at least one used segment, sorted."""
    s = segments_t.c
    with engine.connect() as conn:
        return list(conn.execute(sa.select(s.datasource).where(s.used).distinct().order_by(s.datasource)).scalars())


@dataclass(frozen=True)
class VisibleSet:
    """One consistent read of the timeline: all a query needs of it.

    Every datasource with used segments, and the visible segments of the datasources it reads.
    """

    datasources: tuple[str, ...]
    segments: Mapping[str, list[SegmentRecord]]
    """Visible segments by datasource, for the datasources read."""

    def resolve(self, reference: str) -> str | None:
        """The datasource a query's table name refers to: the same name, else the same in any case."""
        if reference in self.datasources:
            return reference
        return next((ds for ds in self.datasources if ds.lower() == reference.lower()), None)

    def complex_columns(self, names: Iterable[str]) -> dict[str, str]:
        """The sketch, first/last and multi-value columns of the datasources ``names``: column -> kind.

        ``names`` match case-insensitively. From the visible segments' descriptors; a column name
        keeps one kind per datasource (``specs.check_update``).
        """
        wanted = {name.lower() for name in names}
        return {column: kind for datasource, records in self.segments.items() if datasource.lower() in wanted
                for record in records for column, kind in record.descriptor.get("complex_columns", {}).items()}


def visible_set(engine: sa.Engine, names: Iterable[str] | None = None) -> VisibleSet:
    """The timeline as of one moment (one REPEATABLE READ transaction).

    Segments of the datasources ``names`` (matched case-insensitively; all when None).
    """
    wanted = None if names is None else {name.lower() for name in names}
    s = segments_t.c
    with engine.connect().execution_options(isolation_level="REPEATABLE READ") as conn, conn.begin():
        every = tuple(conn.execute(sa.select(s.datasource).where(s.used).distinct().order_by(s.datasource)).scalars())
        read = [ds for ds in every if wanted is None or ds.lower() in wanted]
        return VisibleSet(every, {ds: visible(read_segments(conn, ds)) for ds in read})


def timeline_mark(engine: sa.Engine) -> tuple[Any, ...]:
    """A value that changes whenever the visible segments may have: used rows, newest row, newest (un)use."""
    s = segments_t.c
    with engine.connect() as conn:
        return tuple(conn.execute(sa.select(sa.func.count().filter(s.used), sa.func.count(),
                                            sa.func.max(s.created_at), sa.func.max(s.used_status_updated_at))).one())
