"""Which overlord leads, as a fencing token the publish transaction checks.

Overlords elect a leader with a PostgreSQL session advisory lock (held on a dedicated
connection; it is released when that session ends, e.g. when the process dies and its TCP
connection goes). A newly elected leader claims the next leader epoch; its tasks carry it, and
:class:`segment_store.publish.AssertLeader` refuses the publish of any task planned under an older epoch: a deposed
leader's in-flight tasks can never publish after a new leader has taken over.
"""

from __future__ import annotations

import logging
import zlib

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert

from segment_store.schema import leadership as leadership_t

__all__ = ["LEADER_LOCK_KEY", "claim_leadership", "current_leader", "current_leader_epoch"]

logger = logging.getLogger(__name__)

LEADER_LOCK_KEY = zlib.crc32(b"overlord.leader")
"""The session advisory lock the leader holds."""


def claim_leadership(conn: sa.Connection, leader: str) -> int:
    """Bump the leader epoch and name ``leader`` (call while holding the leader lock); the new epoch.

    The epoch is at least PostgreSQL's clock in microseconds, so it never goes back: a metadata store restored
    from a backup holds an older epoch, and the next leader still claims one past every epoch claimed
    before the restore (a task a pre-restore leader planned can never publish).
    """
    now_us = sa.cast(sa.func.floor(sa.extract("epoch", sa.func.clock_timestamp()) * 1_000_000), sa.BigInteger)
    stmt = pg_insert(leadership_t).values(id=1, epoch=sa.func.greatest(1, now_us), leader=leader)
    epoch = conn.execute(stmt.on_conflict_do_update(
        index_elements=[leadership_t.c.id],
        set_={"epoch": sa.func.greatest(leadership_t.c.epoch + 1, now_us), "leader": leader,
              "elected_at": sa.func.now()},
    ).returning(leadership_t.c.epoch)).scalar_one()
    logger.info("leadership claimed: leader=%s epoch=%d", leader, epoch)
    return int(epoch)


def current_leader_epoch(conn: sa.Connection, *, lock: bool = False) -> int:
    """The current leader epoch (0 if no overlord was ever elected); ``lock`` holds it until commit."""
    query = sa.select(leadership_t.c.epoch).where(leadership_t.c.id == 1)
    epoch = conn.execute(query.with_for_update(read=True) if lock else query).scalar()
    return int(epoch or 0)


def current_leader(engine: sa.Engine) -> str | None:
    """The name the current leader claimed leadership under (its advertised URL if it has one); None if none."""
    with engine.connect() as conn:
        return conn.execute(sa.select(leadership_t.c.leader).where(leadership_t.c.id == 1)).scalar()
