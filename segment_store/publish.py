"""The publish transaction: the only writer of committed offsets and ingested segment rows.

A finished task asks to commit its segments and its end offsets. In one transaction:

1. lock the datasource's offsets row (``SELECT ... FOR UPDATE``; created empty if missing);
2. validate the preconditions (:class:`AssertLeader`, :class:`AssertEpoch`, :class:`AssertTopic`,
   :class:`AssertStartOffsets`), each an "expected X, found Y" check;
3. write the merged end offsets and bump the row's version;
4. insert the segment rows at their intervals' current versions, used.

The row lock is the one concurrency mechanism: every writer of a datasource's offsets or
segments (publish, compaction swap, reset) takes it first, so the offsets read in step 1 are
the ones step 3 replaces. ``version`` counts those writes; tasks are planned against it, so a
range read again after a reset gets new segment ids.

Outcomes are values; only infrastructure faults and bugs raise.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import psycopg.errors
import sqlalchemy as sa

from segment_store.database import is_bounded_wait_timeout
from segment_store.deep_storage import DeepStorage
from segment_store.descriptors import SegmentDescriptor
from segment_store.leadership import current_leader_epoch
from segment_store.offsets import OffsetRange, Offsets
from segment_store.records import CommittedOffsets, lock_offsets_row
from segment_store.schema import datasource_offsets as offsets_t
from segment_store.schema import segments as segments_t

__all__ = ["AssertEpoch", "AssertLeader", "AssertStartOffsets", "AssertTopic", "PublishOutcome", "PublishRequest",
           "Status", "publish"]

logger = logging.getLogger(__name__)

Status = Literal["ok", "already_published", "retryable", "fatal"]
"""``ok``: committed. ``already_published``: a replica or retry committed exactly this range
first (nothing written, not an error). ``retryable``: an earlier range is still publishing.
``fatal``: this range can never be published (its files are orphans)."""


@dataclass(frozen=True)
class PublishRequest:
    """What a finished task asks to commit: its offset range and the segments it wrote.

    ``epoch`` is the offsets row's epoch the task was planned under (0 for a datasource never
    reset). ``initial_offsets`` is where a partition without a committed offset must start;
    it may be empty (the overlord commits starting offsets before planning, so it is).
    """

    datasource: str
    topic: str
    task_id: str
    start_offsets: Offsets
    end_offsets: Offsets
    initial_offsets: Offsets = field(default_factory=Offsets)
    segments: tuple[SegmentDescriptor, ...] = ()
    epoch: int = 0
    leader_epoch: int | None = None
    """The leader epoch of the overlord that planned the task (None: not planned by a leader, e.g.
    ``overlord index`` by hand)."""

    def __post_init__(self) -> None:
        who = f"task {self.task_id} of datasource {self.datasource!r}"
        try:
            offset_range = OffsetRange(Offsets(self.start_offsets), Offsets(self.end_offsets))
            initial = Offsets(self.initial_offsets)
        except ValueError as exc:
            raise ValueError(f"{who}: {exc}") from None
        object.__setattr__(self, "start_offsets", offset_range.start)
        object.__setattr__(self, "end_offsets", offset_range.end)
        object.__setattr__(self, "initial_offsets", initial)
        object.__setattr__(self, "segments", tuple(self.segments))
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
    committed: Offsets

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class Requirement(Protocol):
    """A precondition of the publish, checked against the offsets row as locked."""

    def validate(self, found: CommittedOffsets) -> PublishOutcome | None:
        """None if it holds; otherwise the outcome that refuses the publish."""


@dataclass(frozen=True)
class AssertLeader:
    """The task was planned by the current leader: a deposed leader's tasks cannot publish."""

    datasource: str
    expected: int
    found: int

    def validate(self, found: CommittedOffsets) -> PublishOutcome | None:
        if self.found == self.expected:
            return None
        return PublishOutcome("fatal", f"datasource {self.datasource!r}: expected leader epoch {self.expected}, "
                              f"found {self.found} (planned by an overlord that is no longer the leader)",
                              found.offsets)


@dataclass(frozen=True)
class AssertEpoch:
    """No reset happened since the task was planned (a reset bumps the epoch)."""

    datasource: str
    epoch: int

    def validate(self, found: CommittedOffsets) -> PublishOutcome | None:
        if found.epoch == self.epoch:
            return None
        return PublishOutcome("fatal", f"datasource {self.datasource!r}: expected offsets epoch {self.epoch}, "
                              f"found {found.epoch} (the offsets were reset after this task was planned)",
                              found.offsets)


@dataclass(frozen=True)
class AssertTopic:
    """The committed offsets belong to the task's topic (or to none yet)."""

    datasource: str
    topic: str

    def validate(self, found: CommittedOffsets) -> PublishOutcome | None:
        if found.topic in (None, self.topic):
            return None
        return PublishOutcome("fatal", f"datasource {self.datasource!r}: expected topic {self.topic!r}, "
                              f"found {found.topic!r}", found.offsets)


@dataclass(frozen=True)
class AssertStartOffsets:
    """Every partition's committed offset is where the task started (Druid's three-way check).

    Per partition: equal -> fine; committed *behind* start -> an earlier task is still
    publishing (retryable); committed *at or past end* (start < end) -> a replica or retry
    published this range (already published); committed strictly *inside* the range, or
    *ahead* of an empty range's start -> overlap (fatal). A partition with no committed
    offset must start at its initial offset. The outcome is the worst partition's, with
    already-published only when every partition with records says so.
    """

    datasource: str
    start: Offsets
    end: Offsets
    initial: Offsets

    def validate(self, found: CommittedOffsets) -> PublishOutcome | None:
        fatal: list[str] = []
        retry: list[str] = []
        done: list[str] = []
        pending = 0
        for p, start in self.start.items():
            committed, where = found.offsets.get(p), f"datasource {self.datasource!r} partition {p}"
            end = self.end[p]
            if committed is None:
                initial = self.initial.get(p)
                if initial is None:
                    fatal.append(f"{where}: no committed offset and no initial offset (task starts at {start})")
                elif initial != start:
                    fatal.append(f"{where}: no committed offset: expected start {initial} (initial offset), "
                                 f"found {start}")
                else:
                    pending += 1
            elif committed == start:
                pending += start < end
            elif committed < start:
                retry.append(f"{where}: expected committed offset {start}, found {committed} "
                             "(an earlier task is still publishing)")
            elif committed >= end:
                done.append(f"{where}: expected committed offset {start}, found {committed} "
                            f"(this range, up to {end}, was already published)")
            else:
                fatal.append(f"{where}: expected committed offset {start}, found {committed} "
                             "(part of this range was published by another task)")
        if done and pending:
            fatal.extend(done)  # some partitions published, others not: never write a partition twice
        verdicts: tuple[tuple[Status, list[str]], ...] = (
            ("fatal", fatal), ("retryable", retry), ("already_published", done))
        for status, messages in verdicts:
            if messages:
                return PublishOutcome(status, "; ".join(messages), found.offsets)
        return None


def _insert_segments(conn: sa.Connection, request: PublishRequest) -> None:
    """Append the segments at their interval's current version, after its last partition."""
    slots: dict[tuple[Any, Any], tuple[int, int]] = {}
    published_by = {"task_id": request.task_id, "topic": request.topic,
                    "start_offsets": request.start_offsets.to_json(),
                    "end_offsets": request.end_offsets.to_json()}
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


def _last_slot(conn: sa.Connection, datasource: str, start: Any, end: Any) -> tuple[int, int]:
    """The interval's current version (1 if new) and its highest partition number (-1 if none)."""
    s = segments_t.c
    same = (s.datasource == datasource) & (s.interval_start == start) & (s.interval_end == end)
    version = conn.execute(sa.select(sa.func.coalesce(sa.func.max(s.version), 1)).where(same)).scalar_one()
    last = conn.execute(sa.select(sa.func.max(s.partition_num)).where(same & (s.version == version))).scalar()
    return int(version), -1 if last is None else int(last)


def _publish_in(conn: sa.Connection, request: PublishRequest, storage: DeepStorage | None) -> PublishOutcome:
    found = lock_offsets_row(conn, request.datasource, request.topic)
    leader: tuple[Requirement, ...] = () if request.leader_epoch is None else (AssertLeader(
        request.datasource, request.leader_epoch, current_leader_epoch(conn, lock=True)),)
    requirements: tuple[Requirement, ...] = (
        *leader,
        AssertEpoch(request.datasource, request.epoch),
        AssertTopic(request.datasource, request.topic),
        AssertStartOffsets(request.datasource, request.start_offsets, request.end_offsets,
                           request.initial_offsets))
    for requirement in requirements:
        refused = requirement.validate(found)
        if refused is not None:
            return refused
    missing = storage.missing(seg.path for seg in request.segments) if storage is not None else []
    if missing:  # cleanup swept them as orphans before this publish took the lock
        return PublishOutcome("fatal", f"datasource {request.datasource!r}: segment files missing (removed "
                              f"by cleanup?): {', '.join(missing[:3])}", found.offsets)
    merged = found.offsets.merged(request.end_offsets)
    conn.execute(offsets_t.update().where(offsets_t.c.datasource == request.datasource).values(
        topic=request.topic, offsets=merged.to_json(), version=offsets_t.c.version + 1, updated_at=sa.func.now()))
    try:
        _insert_segments(conn, request)
    except sa.exc.IntegrityError as exc:
        if not isinstance(exc.orig, psycopg.errors.UniqueViolation):
            raise
        return PublishOutcome("fatal", f"datasource {request.datasource!r}: segment already published "
                              f"({exc.orig.diag.message_detail or exc.orig})", found.offsets)
    return PublishOutcome("ok", f"datasource {request.datasource!r}: published {len(request.segments)} "
                          "segment(s)", merged)


def publish(engine: sa.Engine, request: PublishRequest, storage: DeepStorage | None = None) -> PublishOutcome:
    """Commit the request's segments and end offsets atomically, or nothing at all.

    With ``storage``, the segment files must still exist once the lock is held: cleanup's
    orphan sweep deletes under the same lock, so a published row never points at a file it
    removed.

    Waits while another publish (or compaction swap, or reset) of the same datasource holds
    its offsets row, as long as the engine's lock timeout allows (:func:`metadata_engine`);
    past it the outcome is retryable. Raises only on infrastructure faults (e.g. the database
    is unreachable).
    """
    try:
        with engine.connect().execution_options(isolation_level="READ COMMITTED") as conn:
            with conn.begin() as tx:
                outcome = _publish_in(conn, request, storage)
                if not outcome.ok:
                    tx.rollback()
    except sa.exc.OperationalError as exc:
        if not is_bounded_wait_timeout(exc):
            raise
        outcome = PublishOutcome("retryable", f"datasource {request.datasource!r}: gave up waiting for the "
                                 f"datasource lock or a statement ({type(exc.orig).__name__}): another "
                                 "writer holds it", Offsets())
    log = logger.warning if outcome.status == "fatal" else logger.info
    log("publish %s: datasource=%s task=%s epoch=%d start=%s end=%s segments=%d committed=%s: %s",
        outcome.status, request.datasource, request.task_id, request.epoch, request.start_offsets.to_json(),
        request.end_offsets.to_json(), len(request.segments), outcome.committed.to_json(), outcome.message)
    return outcome

