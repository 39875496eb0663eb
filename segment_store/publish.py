"""The publish transaction: the only writer of committed offsets and ingested segment rows.

A finished task asks to commit its segments and its end offsets. In one transaction:

1. lock the datasource's offsets row (``SELECT ... FOR UPDATE``; created empty if missing);
2. validate the preconditions (:class:`AssertLeader`, :class:`AssertEpoch`, :class:`AssertTopic`,
   :class:`AssertTopicIds`, :class:`AssertStartOffsets`), each an "expected X, found Y" check;
3. write the merged end offsets and bump the row's version;
4. insert the segment rows at their intervals' current versions, used.

Tasks of several datasources that finish together publish in one such transaction
(:func:`publish_many`): every statement covers all of them, each datasource's checks are its
own, and a refusal leaves out only its own rows.

The row lock is the one concurrency mechanism: every writer of a datasource's offsets or
segments (publish, compaction swap, reset) takes it first, so the offsets read in step 1 are
the ones step 3 replaces. ``version`` counts those writes; tasks are planned against it, so a
range read again after a reset gets new segment ids.

Outcomes are values; only infrastructure faults and bugs raise.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import psycopg.errors
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert

from segment_store.database import is_bounded_wait_timeout
from segment_store.deep_storage import DeepStorage
from segment_store.descriptors import SegmentDescriptor
from segment_store.leadership import current_leader_epoch
from segment_store.offsets import OffsetRange, Offsets, Partition
from segment_store.records import OFFSETS_COLUMNS, CommittedOffsets, committed_row, lock_offsets_row
from segment_store.schema import datasource_offsets as offsets_t
from segment_store.schema import leadership as leadership_t
from segment_store.schema import partition_topic_ids as ids_t

__all__ = ["AssertEpoch", "AssertLeader", "AssertStartOffsets", "AssertTopic", "AssertTopicIds", "Publication",
           "PublishOutcome", "PublishRequest", "Status", "publish", "publish_many"]

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
    topic_ids: Mapping[Partition, str] = field(default_factory=dict)
    """The broker's topic ID of each partition's topic after the task read it (empty: not checked)."""

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
    row: CommittedOffsets | None = None
    """The offsets row as committed (ok only): what a supervisor plans its next task against."""

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


@dataclass(frozen=True)
class AssertTopicIds:
    """Each partition's topic has the ID recorded when its offsets were pinned: the topic was not re-created.

    ``current`` is what the broker said after the task read its records: a topic re-created before or
    while the task read it has a new ID, and what was read may be the new topic's records under the old
    topic's offsets. A partition with no recorded ID is not refused (its ID is recorded with the publish).
    """

    datasource: str
    current: Mapping[Partition, str]
    recorded: Mapping[str, str]

    def validate(self, found: CommittedOffsets) -> PublishOutcome | None:
        changed = {p: (self.recorded[str(p)], now) for p, now in self.current.items()
                   if self.recorded.get(str(p), now) != now}
        if not changed:
            return None
        return PublishOutcome("fatal", f"datasource {self.datasource!r}: the topic of partitions "
                              f"{sorted(map(str, changed))} was re-created since their offsets were committed "
                              f"(topic IDs {', '.join(f'{o} -> {n}' for o, n in changed.values())})", found.offsets)


Publication = tuple[PublishRequest, "DeepStorage | None"]
"""A request and the deep storage its files must still be in once the lock is held (None: not checked)."""


_LEADER_EPOCH = (sa.select(leadership_t.c.epoch).where(leadership_t.c.id == 1).with_for_update(read=True)
                 .scalar_subquery())
"""The leader epoch, held until commit: a leader elected meanwhile waits, so a deposed leader's task never commits."""
_RECORDED_IDS = (sa.select(sa.func.jsonb_object_agg(ids_t.c.partition, ids_t.c.topic_id))
                 .where(ids_t.c.datasource == offsets_t.c.datasource).scalar_subquery())
_LOCK = {wait: sa.select(offsets_t.c.datasource, *OFFSETS_COLUMNS, _LEADER_EPOCH.label("leader_epoch"),
                         _RECORDED_IDS.label("recorded_ids"))
         .where(offsets_t.c.datasource == sa.any_(sa.bindparam("names", type_=ARRAY(sa.Text))))
         .order_by(offsets_t.c.datasource).with_for_update(of=offsets_t, skip_locked=not wait)
         for wait in (True, False)}
"""Lock the named datasources' offsets rows in name order (writers of several never deadlock), and read them with
the leader epoch and each one's recorded topic IDs: one round trip (the names as one array: the SQL text never
changes, so its compiled and prepared forms are reused)."""


_WRITE = sa.text("""
WITH offsets_written AS (
    UPDATE datasource_offsets o SET topic = w.topic, offsets = w.offsets, version = o.version + 1,
        updated_at = now()
    FROM jsonb_to_recordset(CAST(:offsets AS jsonb)) AS w(datasource text, topic text, offsets jsonb)
    WHERE o.datasource = w.datasource),
ids_recorded AS (
    INSERT INTO partition_topic_ids (datasource, partition, topic_id)
    SELECT * FROM jsonb_to_recordset(CAST(:topic_ids AS jsonb)) AS i(datasource text, partition text, topic_id text)
    ON CONFLICT DO NOTHING)
INSERT INTO segments (id, datasource, interval_start, interval_end, version, partition_num, path, size_bytes,
                      num_rows, used, descriptor)
SELECT s.id, s.datasource, s.interval_start, s.interval_end, coalesce(last.version, 1),
    coalesce(last.partition_num, -1) + row_number() OVER (
        PARTITION BY s.datasource, s.interval_start, s.interval_end ORDER BY s.n),
    s.path, s.size_bytes, s.num_rows, true, s.descriptor
FROM jsonb_to_recordset(CAST(:segments AS jsonb)) AS s(n integer, id text, datasource text,
    interval_start timestamptz, interval_end timestamptz, path text, size_bytes bigint, num_rows bigint,
    descriptor jsonb)
LEFT JOIN LATERAL (
    SELECT x.version, x.partition_num FROM segments x
    WHERE (x.datasource, x.interval_start, x.interval_end) = (s.datasource, s.interval_start, s.interval_end)
    ORDER BY x.version DESC, x.partition_num DESC LIMIT 1) AS last ON true""")
"""The round's writes in one statement (one round trip, compiled once), each set of rows a JSON array: the locked
rows' merged end offsets and topic (their versions bumped), the topic IDs recorded first, and the segment rows, each
appended at its interval's current version (1 for a new interval) after the last partition there, in the order given.
It runs after the lock statement, so it sees every segment row the lock's previous holders committed."""


@dataclass
class _Locked:
    """What a round's transaction holds: the offsets rows it locked, the leader epoch, the recorded topic IDs."""

    rows: dict[str, CommittedOffsets] = field(default_factory=dict)
    leader: int = 0
    recorded: dict[str, dict[str, str]] = field(default_factory=dict)


def _lock_rows(conn: sa.Connection, batch: Sequence[PublishRequest], wait: bool) -> _Locked:
    """Lock and read the batch's datasources' offsets rows; a missing one is created.

    With ``wait`` False, a row another transaction holds is left out (its request waits alone):
    one datasource's long writer never holds the others' publishes back.
    """
    locked = _Locked()
    for row in conn.execute(_LOCK[wait], {"names": sorted({r.datasource for r in batch})}):
        locked.rows[row.datasource] = committed_row(row)
        locked.leader = int(row.leader_epoch or 0)
        locked.recorded[row.datasource] = row.recorded_ids or {}
    leader_read = bool(locked.rows)
    missing = [request for request in batch if request.datasource not in locked.rows]
    if wait:
        for request in missing:
            locked.rows[request.datasource] = lock_offsets_row(conn, request.datasource, request.topic)
    elif missing:  # new rows are ours; rows that exist were locked by another writer
        created = conn.execute(pg_insert(offsets_t).values(
            [{"datasource": r.datasource, "topic": r.topic, "offsets": {}, "version": 0} for r in missing])
            .on_conflict_do_nothing(index_elements=[offsets_t.c.datasource]).returning(offsets_t.c.datasource))
        for name in created.scalars():
            locked.rows[name] = CommittedOffsets(next(r.topic for r in missing if r.datasource == name), Offsets(), 0)
    if missing:  # rare: a datasource's first publish
        locked.recorded.update(_recorded_topic_ids(conn, [r for r in missing if r.datasource in locked.rows]))
        if not leader_read:
            locked.leader = current_leader_epoch(conn, lock=True)
    return locked


def _recorded_topic_ids(conn: sa.Connection, batch: Sequence[PublishRequest]) -> dict[str, dict[str, str]]:
    """``{datasource: {partition: topic ID}}`` recorded for the batch's datasources."""
    recorded: dict[str, dict[str, str]] = {request.datasource: {} for request in batch}
    query = sa.select(ids_t.c.datasource, ids_t.c.partition, ids_t.c.topic_id).where(
        ids_t.c.datasource.in_(sorted(recorded)))
    for row in conn.execute(query):
        recorded[row.datasource][row.partition] = row.topic_id
    return recorded


def _refusal(request: PublishRequest, storage: DeepStorage | None, found: CommittedOffsets, leader: int,
             recorded: Mapping[str, str]) -> PublishOutcome | None:
    """The outcome that refuses ``request`` as ``found`` under the lock; None if it may commit."""
    requirements: tuple[Requirement, ...] = (
        *(() if request.leader_epoch is None else (AssertLeader(request.datasource, request.leader_epoch, leader),)),
        AssertEpoch(request.datasource, request.epoch),
        AssertTopic(request.datasource, request.topic),
        AssertTopicIds(request.datasource, request.topic_ids, recorded),
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
    return None


def _segment_rows(accepted: Sequence[PublishRequest]) -> list[dict[str, Any]]:
    """The accepted requests' segment rows as :data:`_WRITE` takes them (JSON values, ``n`` their order)."""
    rows: list[dict[str, Any]] = []
    for request in accepted:
        published_by = {"task_id": request.task_id, "topic": request.topic,
                        "start_offsets": request.start_offsets.to_json(), "end_offsets": request.end_offsets.to_json()}
        for seg in request.segments:
            rows.append({"n": len(rows), "id": seg.id, "datasource": seg.datasource,
                         "interval_start": seg.interval_start.isoformat(), "interval_end": seg.interval_end.isoformat(),
                         "path": seg.path, "size_bytes": seg.size_bytes, "num_rows": seg.num_rows,
                         "descriptor": {**seg.details, "published_by": published_by}})
    return rows


def _publish_round(conn: sa.Connection, batch: Sequence[Publication], wait: bool) -> dict[int, PublishOutcome]:
    """Publish ``batch`` (one request per datasource) in ``conn``'s transaction: each outcome by its index.

    Requests whose row another writer held (``wait`` False) get no outcome. Every statement covers
    the whole batch: a handful of round trips however many datasources publish together.
    """
    locked = _lock_rows(conn, [request for request, _ in batch], wait)
    found, recorded = locked.rows, locked.recorded
    outcomes: dict[int, PublishOutcome] = {}
    accepted: list[tuple[int, PublishRequest, CommittedOffsets]] = []
    for i, (request, storage) in enumerate(batch):
        row = found.get(request.datasource)
        if row is None:
            continue
        refused = _refusal(request, storage, row, locked.leader, recorded.get(request.datasource, {}))
        if refused is not None:
            outcomes[i] = refused
        else:
            accepted.append((i, request, row))
    if not accepted:
        return outcomes
    merged = {i: row.offsets.merged(request.end_offsets) for i, request, row in accepted}
    requests_in = [r for _, r, _ in accepted]
    new_ids = [{"datasource": r.datasource, "partition": str(p), "topic_id": topic_id} for r in requests_in
               for p, topic_id in r.topic_ids.items() if str(p) not in recorded.get(r.datasource, {})]
    conn.execute(_WRITE, {
        "offsets": json.dumps([{"datasource": r.datasource, "topic": r.topic, "offsets": merged[i].to_json()}
                               for i, r, _ in accepted]),
        "topic_ids": json.dumps(new_ids), "segments": json.dumps(_segment_rows(requests_in))})
    for i, request, row in accepted:
        outcomes[i] = PublishOutcome("ok", f"datasource {request.datasource!r}: published {len(request.segments)} "
                                     "segment(s)", merged[i], CommittedOffsets(request.topic, merged[i],
                                                                               row.version + 1, row.epoch))
    return outcomes


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
    return publish_many(engine, [(request, storage)])[0]


def publish_many(engine: sa.Engine, batch: Sequence[Publication]) -> list[PublishOutcome]:
    """:func:`publish` each request, those of different datasources in one transaction: their outcomes in order.

    Each request is still its own guarded commit: its checks are its datasource's alone, and a
    refusal only leaves its own rows out. What is checked per datasource under its lock is the
    same as alone, so publishing together changes nothing but the number of round trips. A
    second request of one datasource (a replica) goes in a later transaction; one whose row
    another writer holds, or a batch that hits a duplicate segment id, is published alone.
    """
    outcomes: dict[int, PublishOutcome] = {}
    pending, alone = list(range(len(batch))), list[int]()
    while pending:
        together = _one_per_datasource(batch, pending)
        pending = [i for i in pending if i not in together]
        try:
            done = _transaction(engine, [batch[i] for i in together], wait=len(together) == 1)
        except sa.exc.IntegrityError as exc:
            if len(together) == 1 or not isinstance(exc.orig, psycopg.errors.UniqueViolation):
                raise
            done = {}
        outcomes.update({i: done[j] for j, i in enumerate(together) if j in done})
        alone.extend(i for j, i in enumerate(together) if j not in done)
    for i in alone:
        outcomes[i] = _transaction(engine, [batch[i]], wait=True)[0]
    for i, (request, _storage) in enumerate(batch):
        _log(request, outcomes[i])
    return [outcomes[i] for i in range(len(batch))]


def _one_per_datasource(batch: Sequence[Publication], indexes: list[int]) -> list[int]:
    """The first of ``indexes`` of each datasource."""
    first: dict[str, int] = {}
    for i in indexes:
        first.setdefault(batch[i][0].datasource, i)
    return sorted(first.values())


def _transaction(engine: sa.Engine, batch: Sequence[Publication], wait: bool) -> dict[int, PublishOutcome]:
    """One transaction of :func:`_publish_round`; a lone request's duplicate segment id or lock timeout as outcomes."""
    request = batch[0][0]
    try:
        with engine.connect().execution_options(isolation_level="READ COMMITTED") as conn:
            with conn.begin() as tx:
                outcomes = _publish_round(conn, batch, wait)
                if not any(outcome.ok for outcome in outcomes.values()):
                    tx.rollback()
        return outcomes
    except sa.exc.IntegrityError as exc:
        if not wait or not isinstance(exc.orig, psycopg.errors.UniqueViolation):
            raise
        return {0: PublishOutcome("fatal", f"datasource {request.datasource!r}: segment already published "
                                  f"({exc.orig.diag.message_detail or exc.orig})", Offsets())}
    except sa.exc.OperationalError as exc:
        if not is_bounded_wait_timeout(exc):
            raise
        return {j: PublishOutcome("retryable", f"datasource {r.datasource!r}: gave up waiting for the datasource "
                                  f"lock or a statement ({type(exc.orig).__name__}): another writer holds it",
                                  Offsets())
                for j, (r, _storage) in enumerate(batch)}


def _log(request: PublishRequest, outcome: PublishOutcome) -> None:
    log = logger.warning if outcome.status == "fatal" else logger.info
    log("publish %s: datasource=%s task=%s epoch=%d start=%s end=%s segments=%d committed=%s: %s",
        outcome.status, request.datasource, request.task_id, request.epoch, request.start_offsets.to_json(),
        request.end_offsets.to_json(), len(request.segments), outcome.committed.to_json(), outcome.message)
