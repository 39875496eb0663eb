"""Reading the metadata store, resetting offsets, and the per-datasource lock every writer takes.

The publish transaction (:mod:`segment_store.publish`) and the compaction swap
(:mod:`segment_store.compaction_swap`) are the only writers of segment rows; they and
:func:`reset_offsets` serialise on :func:`lock_offsets_row`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert

from segment_store.leadership import current_leader_epoch
from segment_store.offsets import Offsets, Partition
from segment_store.schema import datasource_offsets as offsets_t
from segment_store.schema import segments as segments_t
from segment_store.topic_ids import forget_topic_ids

__all__ = ["OFFSETS_COLUMNS", "CommittedOffsets", "SegmentRecord", "committed_offsets", "committed_row",
           "lock_offsets_row", "pin_offsets", "read_committed", "skip_offsets", "reset_offsets", "segment_record",
           "used_segments"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommittedOffsets:
    """A datasource's offsets row.

    ``topic`` is None only after a reset, before any publish or pin; ``version`` counts the
    row's writes and ``epoch`` its resets; neither ever goes back.
    """

    topic: str | None
    offsets: Offsets
    version: int
    epoch: int = 0


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
    used_status_updated_at: datetime | None = None


def committed_row(row: Any) -> CommittedOffsets:
    """A row of :data:`OFFSETS_COLUMNS` as a record."""
    return CommittedOffsets(row.topic, Offsets.from_json(row.offsets), int(row.version), int(row.epoch))


OFFSETS_COLUMNS = (offsets_t.c.topic, offsets_t.c.offsets, offsets_t.c.version, offsets_t.c.epoch)


def lock_offsets_row(conn: sa.Connection, datasource: str, topic: str | None) -> CommittedOffsets:
    """Make sure the datasource has an offsets row, lock it until the transaction ends, read it.

    Every transaction that changes a datasource's offsets or segments takes this lock first,
    so they run one after another.
    """
    conn.execute(pg_insert(offsets_t)
                 .values(datasource=datasource, topic=topic, offsets={}, version=0)
                 .on_conflict_do_nothing(index_elements=[offsets_t.c.datasource]))
    query = sa.select(*OFFSETS_COLUMNS).where(offsets_t.c.datasource == datasource).with_for_update()
    return committed_row(conn.execute(query).one())


def read_committed(conn: sa.Connection, datasource: str) -> CommittedOffsets | None:
    """The datasource's committed offsets as ``conn`` sees them, or None if it has none."""
    row = conn.execute(sa.select(*OFFSETS_COLUMNS).where(offsets_t.c.datasource == datasource)).one_or_none()
    return None if row is None else committed_row(row)


def committed_offsets(engine: sa.Engine, datasource: str) -> CommittedOffsets | None:
    """The datasource's committed offsets, or None if it has none."""
    with engine.connect() as conn:
        return read_committed(conn, datasource)


def used_segments(engine: sa.Engine, datasource: str) -> list[SegmentRecord]:
    """The datasource's used segment rows, ordered by interval start, version, partition number."""
    s = segments_t.c
    query = (sa.select(segments_t).where((s.datasource == datasource) & s.used)
             .order_by(s.interval_start, s.version, s.partition_num))
    with engine.connect() as conn:
        return [segment_record(row) for row in conn.execute(query).mappings()]


def segment_record(row: sa.RowMapping) -> SegmentRecord:
    """A ``segments`` row (as a mapping) as a record, its times in UTC."""
    values: dict[str, Any] = {k: (v.astimezone(UTC) if isinstance(v, datetime) else v) for k, v in row.items()}
    return SegmentRecord(**values)


def reset_offsets(engine: sa.Engine, datasource: str, offsets: Mapping[Partition, int] | None
                  ) -> tuple[Offsets, CommittedOffsets]:
    """Reset committed offsets, like Druid's supervisor reset (None) or resetOffsets (a map).

    Returns the offsets it replaced (as committed when the reset took the lock) and the new row.

    None empties the offsets (and forgets the topic): every partition then starts from its
    initial offset. A map overwrites the given partitions and leaves the others. Both bump
    the epoch, so no task planned before the reset can publish after it, and the version, so
    a range read again gets new segment ids. Both wait for an in-flight publish (its lock), and
    forget the reset partitions' topic IDs: the topic they are read from next is the one recorded.
    """
    with engine.begin() as conn:
        found = lock_offsets_row(conn, datasource, None)
        forget_topic_ids(conn, datasource, None if offsets is None else Offsets(offsets))
        row = _write_reset(conn, datasource, Offsets() if offsets is None else found.offsets.merged(Offsets(offsets)),
                           forget_topic=offsets is None)
    logger.info("reset offsets: datasource=%s %s, epoch %d", datasource,
                "emptied" if offsets is None else f"partitions={dict(offsets)}", row.epoch)
    return found.offsets, committed_row(row)


def skip_offsets(engine: sa.Engine, datasource: str, moves: Mapping[Partition, tuple[int, int]],
                 leader_epoch: int | None = None) -> CommittedOffsets | None:
    """Move partitions ``(from, to)`` past records that can no longer be read (``resetOffsetAutomatically``).

    Only if every partition is still committed at its ``from`` and ``leader_epoch`` (when given) is
    still the current leader epoch: a supervisor that read the offsets before another publish, or
    a leader deposed meanwhile, moves nothing back (None). Bumps the epoch and version as
    :func:`reset_offsets` does.
    """
    with engine.begin() as conn:
        if leader_epoch is not None and current_leader_epoch(conn, lock=True) != leader_epoch:
            logger.warning("skip offsets refused: datasource=%s, leader epoch %d is no longer current",
                           datasource, leader_epoch)
            return None
        found = lock_offsets_row(conn, datasource, None)
        if any(found.offsets.get(p) != start for p, (start, _) in moves.items()):
            logger.warning("skip offsets refused: datasource=%s, committed %s moved from %s meanwhile", datasource,
                           dict(found.offsets), {p: start for p, (start, _) in moves.items()})
            return None
        row = _write_reset(conn, datasource, found.offsets.merged(Offsets({p: to for p, (_, to) in moves.items()})),
                           forget_topic=False)
    logger.info("skipped offsets: datasource=%s %s, epoch %d", datasource, dict(moves), row.epoch)
    return committed_row(row)


def _write_reset(conn: sa.Connection, datasource: str, offsets: Offsets, *, forget_topic: bool) -> Any:
    """Write ``offsets`` to the locked row, bumping version and epoch (no task planned before can publish)."""
    values: dict[str, Any] = {"offsets": offsets.to_json(), "version": offsets_t.c.version + 1,
                              "epoch": offsets_t.c.epoch + 1, "updated_at": sa.func.now()}
    if forget_topic:
        values["topic"] = None
    return conn.execute(offsets_t.update().where(offsets_t.c.datasource == datasource).values(**values)
                        .returning(*OFFSETS_COLUMNS)).one()


def pin_offsets(engine: sa.Engine, datasource: str, topic: str, offsets: Mapping[Partition, int]) -> CommittedOffsets:
    """Commit where partitions without a committed offset start, and the stream if the row has none.

    Partitions that have an offset keep it, and the epoch stays: tasks in flight are not
    affected. Returns the row after the change.
    """
    with engine.begin() as conn:
        found = lock_offsets_row(conn, datasource, topic)
        new = Offsets({p: o for p, o in offsets.items() if p not in found.offsets})
        row = conn.execute(offsets_t.update().where(offsets_t.c.datasource == datasource).values(
            offsets=found.offsets.merged(new).to_json(), topic=found.topic or topic,
            version=offsets_t.c.version + 1, updated_at=sa.func.now()).returning(*OFFSETS_COLUMNS)).one()
    logger.info("pinned starting offsets: datasource=%s topic=%s partitions=%s", datasource, topic, dict(new))
    return committed_row(row)
