"""The publish transaction: the only writer of committed offsets and ingested segment rows.

An offset is the next record to read; a task covers ``[start_offsets, end_offsets)``. Outcomes
are values (ok | retryable | fatal); only infrastructure faults and bugs raise.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Literal

import psycopg.errors
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert

from segment_store.descriptors import SegmentDescriptor
from segment_store.schema import datasource_offsets as offsets_t
from segment_store.schema import segments as segments_t

__all__ = ["CommittedOffsets", "PublishOutcome", "PublishRequest", "SegmentRecord", "committed_offsets",
           "publish", "reset_offsets", "used_segments"]

logger = logging.getLogger(__name__)

Status = Literal["ok", "retryable", "fatal"]
_UTC_FIELDS = ("interval_start", "interval_end", "created_at")
_Locked = tuple[str | None, dict[int, int], int]
"""An offsets row as read under its lock: topic, offsets, version."""


def _frozen(offsets: Mapping[int, int], what: str) -> Mapping[int, int]:
    for partition, offset in offsets.items():
        if offset < 0:
            raise ValueError(f"{what}: offset of partition {partition} must be >= 0, got {offset}")
    return MappingProxyType({int(p): int(o) for p, o in sorted(offsets.items())})


@dataclass(frozen=True)
class PublishRequest:
    """What a finished task asks to commit: its offset range and the segments it wrote.

    ``initial_offsets`` is where a partition without a committed offset must start (the
    earliest or latest offset, per the supervisor spec); it may be empty.
    """

    datasource: str
    topic: str
    task_id: str
    start_offsets: Mapping[int, int]
    end_offsets: Mapping[int, int]
    initial_offsets: Mapping[int, int] = field(default_factory=dict)
    segments: tuple[SegmentDescriptor, ...] = ()

    def __post_init__(self) -> None:
        who = f"task {self.task_id} of datasource {self.datasource!r}"
        for name in ("start_offsets", "end_offsets", "initial_offsets"):
            object.__setattr__(self, name, _frozen(getattr(self, name), f"{who}: {name}"))
        object.__setattr__(self, "segments", tuple(self.segments))
        if set(self.start_offsets) != set(self.end_offsets):
            raise ValueError(f"{who}: expected the same partitions in start and end offsets, "
                             f"found {sorted(self.start_offsets)} and {sorted(self.end_offsets)}")
        for p, start in self.start_offsets.items():
            if self.end_offsets[p] < start:
                raise ValueError(f"{who}: partition {p}: expected end >= start {start}, "
                                 f"found {self.end_offsets[p]}")
        for seg in self.segments:
            if seg.datasource != self.datasource:
                raise ValueError(f"{who}: segment {seg.id} belongs to datasource {seg.datasource!r}")
        if len({seg.id for seg in self.segments}) != len(self.segments):
            raise ValueError(f"{who}: duplicate segment ids")


@dataclass(frozen=True)
class PublishOutcome:
    """``committed`` is the stored offsets after the transaction (ok) or as found (otherwise)."""

    status: Status
    message: str
    committed: Mapping[int, int]

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class CommittedOffsets:
    """A datasource's committed offsets; ``topic`` is None only after a reset before any publish."""

    topic: str | None
    offsets: Mapping[int, int]
    version: int


@dataclass(frozen=True)
class SegmentRecord:
    """One row of the ``segments`` table."""

    id: str
    datasource: str
    interval_start: datetime
    interval_end: datetime
    version: int
    partition_num: int
    path: str
    size_bytes: int
    num_rows: int
    used: bool
    created_at: datetime
    descriptor: Mapping[str, Any]


def _decode(stored: Mapping[str, int]) -> dict[int, int]:
    return {int(p): int(o) for p, o in sorted(stored.items(), key=lambda kv: int(kv[0]))}


def _encode(offsets: Mapping[int, int]) -> dict[str, int]:
    return {str(p): o for p, o in sorted(offsets.items())}


def _check_offsets(request: PublishRequest, stored: Mapping[int, int]) -> PublishOutcome | None:
    """The three-way start-offset check; None when every covered partition matches."""
    fatal: list[str] = []
    retry: list[str] = []
    for p, start in request.start_offsets.items():
        found, where = stored.get(p), f"datasource {request.datasource!r} partition {p}"
        if found is None:
            initial = request.initial_offsets.get(p)
            if initial is None:
                fatal.append(f"{where}: no committed offset and no initial offset (task starts at {start})")
            elif initial != start:
                fatal.append(f"{where}: no committed offset: expected start {initial} (initial offset), "
                             f"found {start}")
        elif found < start:
            retry.append(f"{where}: expected committed offset {start}, found {found} "
                         "(an earlier task is still publishing)")
        elif found > start:
            fatal.append(f"{where}: expected committed offset {start}, found {found} "
                         "(this range was already published)")
    if fatal or retry:
        return PublishOutcome("fatal" if fatal else "retryable", "; ".join(fatal or retry), stored)
    return None


def lock_offsets_row(conn: sa.Connection, datasource: str, topic: str | None) -> _Locked | None:
    """Make sure the datasource has an offsets row, lock it until the transaction ends, read it.

    Every transaction that changes a datasource's segments takes this lock first (publish and
    the compaction swap), so they run one after another.
    """
    conn.execute(pg_insert(offsets_t)
                 .values(datasource=datasource, topic=topic, offsets={}, version=0)
                 .on_conflict_do_nothing(index_elements=[offsets_t.c.datasource]))
    query = (sa.select(offsets_t.c.topic, offsets_t.c.offsets, offsets_t.c.version)
             .where(offsets_t.c.datasource == datasource).with_for_update())
    row = conn.execute(query).one_or_none()
    return None if row is None else (row.topic, _decode(row.offsets), int(row.version))


def _last_slot(conn: sa.Connection, datasource: str, start: datetime, end: datetime) -> tuple[int, int]:
    """The interval's current version (1 if new) and its highest partition number (-1 if none)."""
    s = segments_t.c
    same = (s.datasource == datasource) & (s.interval_start == start) & (s.interval_end == end)
    version = conn.execute(sa.select(sa.func.coalesce(sa.func.max(s.version), 1)).where(same)).scalar_one()
    last = conn.execute(sa.select(sa.func.max(s.partition_num)).where(same & (s.version == version))).scalar()
    return int(version), -1 if last is None else int(last)


def _insert_segments(conn: sa.Connection, request: PublishRequest) -> None:
    """Append the segments at their interval's current version, after its last partition."""
    slots: dict[tuple[datetime, datetime], tuple[int, int]] = {}
    published_by = {"task_id": request.task_id, "topic": request.topic,
                    "start_offsets": _encode(request.start_offsets),
                    "end_offsets": _encode(request.end_offsets)}
    rows: list[dict[str, Any]] = []
    for seg in request.segments:
        key = (seg.interval_start, seg.interval_end)
        version, last = slots.get(key) or _last_slot(conn, request.datasource, *key)
        slots[key] = (version, last + 1)
        rows.append({"id": seg.id, "datasource": seg.datasource, "interval_start": seg.interval_start,
                     "interval_end": seg.interval_end, "version": version, "partition_num": last + 1,
                     "path": seg.path, "size_bytes": seg.size_bytes, "num_rows": seg.num_rows, "used": True,
                     "descriptor": {**seg.details, "published_by": published_by}})
    if rows:
        conn.execute(segments_t.insert(), rows)


def _publish_in(conn: sa.Connection, request: PublishRequest) -> PublishOutcome:
    locked = lock_offsets_row(conn, request.datasource, request.topic)
    if locked is None:
        return PublishOutcome("retryable", f"datasource {request.datasource!r}: offsets row was deleted "
                              "(reset) while publishing", {})
    topic, stored, read_version = locked
    if topic is not None and topic != request.topic:
        return PublishOutcome("fatal", f"datasource {request.datasource!r}: expected topic "
                              f"{request.topic!r}, found {topic!r}", stored)
    rejected = _check_offsets(request, stored)
    if rejected is not None:
        return rejected
    merged = {**stored, **request.end_offsets}
    swapped = conn.execute(
        offsets_t.update()
        .where((offsets_t.c.datasource == request.datasource) & (offsets_t.c.version == read_version))
        .values(topic=request.topic, offsets=_encode(merged), version=offsets_t.c.version + 1,
                updated_at=sa.func.now()))
    if swapped.rowcount != 1:
        return PublishOutcome("retryable", f"datasource {request.datasource!r}: expected offsets version "
                              f"{read_version}, found another (concurrent write)", stored)
    try:
        _insert_segments(conn, request)
    except sa.exc.IntegrityError as exc:
        if not isinstance(exc.orig, psycopg.errors.UniqueViolation):
            raise
        return PublishOutcome("fatal", f"datasource {request.datasource!r}: segment already published "
                              f"({exc.orig.diag.message_detail or exc.orig})", stored)
    return PublishOutcome("ok", f"datasource {request.datasource!r}: published {len(request.segments)} "
                          "segment(s)", MappingProxyType(merged))


def publish(engine: sa.Engine, request: PublishRequest) -> PublishOutcome:
    """Commit the request's segments and end offsets atomically, or nothing at all.

    Blocks while another publish (or compaction swap, or reset) of the same datasource holds
    its offsets row. Raises only on infrastructure faults (e.g. the database is unreachable).
    """
    with engine.connect().execution_options(isolation_level="READ COMMITTED") as conn:
        with conn.begin() as tx:
            outcome = _publish_in(conn, request)
            if not outcome.ok:
                tx.rollback()
    log = logger.info if outcome.status != "fatal" else logger.warning
    log("publish %s: datasource=%s task=%s start=%s end=%s segments=%d committed=%s: %s",
        outcome.status, request.datasource, request.task_id, dict(request.start_offsets),
        dict(request.end_offsets), len(request.segments), dict(outcome.committed), outcome.message)
    return outcome


def committed_offsets(engine: sa.Engine, datasource: str) -> CommittedOffsets | None:
    """The datasource's committed offsets, or None if it has none."""
    query = sa.select(offsets_t.c.topic, offsets_t.c.offsets, offsets_t.c.version).where(
        offsets_t.c.datasource == datasource)
    with engine.connect() as conn:
        row = conn.execute(query).one_or_none()
    if row is None:
        return None
    return CommittedOffsets(row.topic, MappingProxyType(_decode(row.offsets)), int(row.version))


def used_segments(engine: sa.Engine, datasource: str) -> list[SegmentRecord]:
    """The datasource's used segment rows, ordered by interval start, version, partition number."""
    s = segments_t.c
    query = (sa.select(segments_t).where((s.datasource == datasource) & s.used)
             .order_by(s.interval_start, s.version, s.partition_num))
    with engine.connect() as conn:
        return [segment_record(row) for row in conn.execute(query).mappings()]


def segment_record(row: sa.RowMapping) -> SegmentRecord:
    """A ``segments`` row (as a mapping) as a record, its times in UTC."""
    return SegmentRecord(**{k: (v.astimezone(UTC) if k in _UTC_FIELDS else v) for k, v in row.items()})


def reset_offsets(engine: sa.Engine, datasource: str, offsets: Mapping[int, int] | None) -> None:
    """Reset committed offsets, like Druid's supervisor reset (None) or resetOffsets (a map).

    None empties the offsets (and forgets the topic): every partition then starts from its
    initial offset. A map overwrites the given partitions and leaves the others. Both bump
    the version, which never goes back, so tasks planned before the reset get new segment
    ids; both wait for an in-flight publish, whose successors then fail the offset check.
    """
    with engine.begin() as conn:
        if offsets is None:
            stmt = pg_insert(offsets_t).values(datasource=datasource, topic=None, offsets={}, version=1)
            conn.execute(stmt.on_conflict_do_update(
                index_elements=[offsets_t.c.datasource],
                set_={"offsets": {}, "topic": None, "version": offsets_t.c.version + 1,
                      "updated_at": sa.func.now()}))
            logger.info("reset offsets: datasource=%s emptied", datasource)
            return
        encoded = _encode(_frozen(offsets, f"reset of datasource {datasource!r}"))
        stmt = pg_insert(offsets_t).values(datasource=datasource, topic=None, offsets=encoded, version=1)
        conn.execute(stmt.on_conflict_do_update(
            index_elements=[offsets_t.c.datasource],
            set_={"offsets": offsets_t.c.offsets.op("||")(stmt.excluded.offsets),
                  "version": offsets_t.c.version + 1, "updated_at": sa.func.now()}))
        logger.info("reset offsets: datasource=%s partitions=%s", datasource, dict(offsets))
